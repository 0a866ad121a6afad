/** `topup` (alias `order`): top-up orders (`/api/topup/`) paid through a payment provider. */
import { Option, type Command } from 'commander';
import type { App } from '../core/context';
import { addPaging, pagingQuery, parseId } from '../core/fields';
import { col, details, pageText, time } from '../core/output';

const COLUMNS = [
  col('ID', 'id', { right: true }), col('TRADE NO', 'trade_no'), col('USER', 'user_id', { right: true }), col('PROVIDER', 'provider'),
  col('AMOUNT', 'amount', { right: true }), col('CUR', 'currency'), col('CREDIT', 'credit', { right: true }), col('STATUS', 'status'),
  col('CREATED', 'created_at', { fmt: time }), col('PAID', 'paid_at', { fmt: time }),
];

export function registerTopup(program: Command, app: App): void {
  const group = program.command('topup')
    .alias('order')
    .description('Top-up orders: buy quota through a payment provider')
    .addHelpText('after', '\nExamples:\n  $ gw topup create --amount 1000 --provider providerA\n  $ gw order list --status paid');

  addPaging(group.command('list')
    .description('List top-up orders (all users for admins; --self for your own)')
    .option('--self', 'only your own orders (any role)')
    .addOption(new Option('--user-id <id>', 'only this user (admins)').argParser(parseId))
    .option('--status <status>', 'pending, paid, ...')
    .option('--provider <name>', 'only this payment provider'))
    .addHelpText('after', '\nExample:\n  $ gw topup list --self --json')
    .action(app.action(async (ctx, _a, o) => {
      const data = await ctx.client().call('GET', o.self ? '/api/topup/self' : '/api/topup/', {
        query: { ...pagingQuery(o), user_id: o.userId, status: o.status, provider: o.provider },
      });
      ctx.print(data, () => pageText(data, COLUMNS));
    }));

  group.command('create')
    .description('Start a top-up; prints the checkout URL to pay at')
    .addOption(new Option('--amount <n>', 'amount to pay, in the smallest currency unit (e.g. cents)').argParser(parseId).makeOptionMandatory())
    .option('--provider <name>', 'payment provider (default: the server\'s)')
    .option('--currency <code>', 'currency, e.g. usd')
    .addHelpText('after', '\nExample:\n  $ gw topup create --amount 2000 --provider providerA')
    .action(app.action(async (ctx, _a, o) => {
      const data = await ctx.client().call('POST', '/api/topup/', { body: { amount: o.amount, provider: o.provider, currency: o.currency } });
      ctx.print(data, () => details([
        ['order', data.id], ['trade no', data.trade_no], ['amount', `${data.amount} ${data.currency ?? ''}`.trim()],
        ['credit', data.credit], ['status', data.status], ['pay at', data.checkout_url],
      ]));
    }));
}
