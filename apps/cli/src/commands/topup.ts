/** `topup` (alias `order`): top-up orders (`/api/topup/`) paid through a payment provider's checkout. */
import { Option, type Command } from 'commander';
import { pathSegment } from '../core/client';
import type { App } from '../core/context';
import { ApiError, UsageError } from '../core/errors';
import { parseId } from '../core/fields';
import { col, details, time } from '../core/output';
import { addScopedList } from '../core/scoped-list';

const COLUMNS = [
  col('ID', 'id', { right: true }), col('TRADE NO', 'trade_no'), col('USER', 'user_id', { right: true }), col('PROVIDER', 'provider'),
  col('AMOUNT', 'amount', { right: true }), col('CUR', 'currency'), col('CREDIT', 'credit', { right: true }), col('STATUS', 'status'),
  col('CREATED', 'created_at', { fmt: time }), col('PAID', 'paid_at', { fmt: time }),
];

const orderDetails = (o: any) => details([
  ['order', o.id], ['trade no', o.trade_no], ['user', o.user_id], ['provider', o.provider], ['amount', `${o.amount} ${o.currency}`],
  ['credit', o.credit], ['status', o.status], ['pay at', o.checkout_url], ['created', time(o.created_at)], ['paid', time(o.paid_at)],
]);

export function registerTopup(program: Command, app: App): void {
  const group = program.command('topup')
    .alias('order')
    .description('Top-up orders: buy quota through a payment provider')
    .addHelpText('after', '\nExamples:\n  $ gw topup info\n  $ gw topup create --amount 1000 --provider providerA\n  $ gw order list --status paid');

  addScopedList(group, app, {
    what: 'top-up orders', adminPath: '/api/topup/', selfPath: '/api/topup/self', columns: COLUMNS,
    filters: [
      { flags: '--user-id <id>', desc: 'only this user', query: 'user_id', parse: parseId, adminOnly: true },
      { flags: '--status <status>', desc: 'order status', query: 'status', choices: ['pending', 'paid', 'failed', 'expired'] },
      { flags: '--provider <name>', desc: 'only this payment provider', query: 'provider', adminOnly: true },
    ],
    examples: ['gw topup list --self --json', 'gw order list --user-id 12 --status pending'],
  });

  group.command('get')
    .description('Show one order (yours, or any for admins)')
    .argument('<trade-no>', 'the order\'s trade number')
    .addHelpText('after', '\nExample:\n  $ gw topup get T20261123ABCD')
    .action(app.action(async (ctx, [tradeNo]) => {
      const data = await ctx.client().call('GET', `/api/topup/${pathSegment(tradeNo, 'trade number')}`);
      ctx.print(data, () => orderDetails(data));
    }));

  group.command('info')
    .description('Top-up settings: currency, minimum and maximum, credit rate, providers')
    .addHelpText('after', '\nExample:\n  $ gw topup info')
    .action(app.action(async (ctx) => {
      const data = await ctx.client().call('GET', '/api/topup/info');
      ctx.print(data, () => details([
        ['currency', data.currency], ['min amount', data.min], ['max amount', data.max],
        ['quota per unit', data.quota_per_unit], ['providers', data.providers],
      ]));
    }));

  group.command('create')
    .description('Start a top-up; prints the checkout URL to pay at')
    .addOption(new Option('--amount <n>', 'amount to pay in minor currency units (e.g. cents)').argParser(parseId).makeOptionMandatory())
    .option('--provider <name>', 'payment provider (default: the only one configured)')
    .addHelpText('after', '\nExample:\n  $ gw topup create --amount 2000 --provider providerA')
    .action(app.action(async (ctx, _a, o) => {
      const client = ctx.client();
      let provider: string | undefined = o.provider;
      if (!provider) {
        const info = await client.call('GET', '/api/topup/info');
        const list: string[] = info.providers ?? [];
        // No provider at all is the gateway's answer (exit 1); several is a choice the operator must make (2).
        if (list.length === 0) throw new ApiError(400, 'provider_not_configured', 'no payment provider is configured on this gateway');
        if (list.length > 1) throw new UsageError(`choose --provider: ${list.join(', ')}`);
        provider = list[0];
      }
      const data = await client.call('POST', '/api/topup/', { body: { amount: o.amount, provider } });
      ctx.print(data, () => details([
        ['trade no', data.trade_no], ['amount', `${data.amount} ${data.currency}`], ['credit', data.credit],
        ['status', data.status], ['pay at', data.checkout_url],
      ]));
    }));

  group.command('reinstate')
    .description('Root: record that a dispute of a paid order was won (providers that send no event for it); gives its hold back once')
    .argument('<trade-no>', 'the order\'s trade number')
    .option('--dispute <id>', 'the provider\'s dispute id (default: the order\'s only withdrawn dispute)')
    .addHelpText('after', '\nExample:\n  $ gw topup reinstate tp_3kq... --dispute disp_123\n\nUse this, not `gw ledger adjust`: an adjustment leaves the dispute holding the order\'s money,\nso a later refund of the payment would take nothing back.')
    .action(app.action(async (ctx, [tradeNo], o) => {
      const body = o.dispute === undefined ? {} : { dispute_id: o.dispute };
      const data = await ctx.client().call('POST', `/api/topup/${pathSegment(tradeNo, 'trade number')}/reinstate`, { body });
      ctx.print(data, () => details([['outcome', data.outcome], ['credited', data.credited]]));
    }));
}
