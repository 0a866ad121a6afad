/** `ledger`: balance movements (`/api/ledger/`), and admin adjustments of a user's balance. */
import { Option, type Command } from 'commander';
import type { App } from '../core/context';
import { parseId, parseIntStrict } from '../core/fields';
import { col, time } from '../core/output';
import { addScopedList } from '../core/scoped-list';

const KINDS = ['topup', 'charge', 'refund', 'adjust', 'redeem', 'clawback', 'reinstate'] as const;

const COLUMNS = [
  col('ID', 'id', { right: true }), col('TIME', 'created_at', { fmt: time }), col('USER', 'user_id', { right: true }),
  col('KIND', 'kind'), col('AMOUNT', 'amount', { right: true }), col('BALANCE', 'balance_after', { right: true }),
  col('REF', 'ref'), col('NOTE', 'note'), col('BY', 'actor_id', { right: true }),
];

export function registerLedger(program: Command, app: App): void {
  const group = program.command('ledger')
    .description('Balance movements (top-ups, charges, refunds, adjustments, redeemed codes)')
    .addHelpText('after', '\nExamples:\n  $ gw ledger list --self\n  $ gw ledger adjust --user-id 12 --amount 500000 --note "goodwill credit"');

  addScopedList(group, app, {
    what: 'ledger entries', adminPath: '/api/ledger/', selfPath: '/api/ledger/self', columns: COLUMNS,
    filters: [
      { flags: '--user-id <id>', desc: 'only this user', query: 'user_id', parse: parseId, adminOnly: true },
      { flags: '--kind <kind>', desc: 'only this kind of entry', query: 'kind', choices: KINDS },
    ],
    examples: ['gw ledger list --user-id 12 --kind adjust', 'gw ledger list --self --json'],
  });

  group.command('adjust')
    .description("Credit (positive) or debit (negative) a user's balance (admin); recorded in the ledger")
    .addOption(new Option('--user-id <id>', 'the user').argParser(parseId).makeOptionMandatory())
    .addOption(new Option('--amount <n>', 'signed quota units, e.g. 500000 or -1000').argParser(parseIntStrict).makeOptionMandatory())
    .addOption(new Option('--note <text>', 'why (kept in the ledger)').makeOptionMandatory())
    .option('--allow-negative', 'allow a debit to take the balance below zero')
    .addHelpText('after', '\nExamples:\n  $ gw ledger adjust --user-id 12 --amount 1000000 --note "invoice 2026-11"\n  $ gw ledger adjust --user-id 12 --amount=-5000 --note "refund of ticket 77"')
    .action(app.action(async (ctx, _a, o) => {
      const body = { user_id: o.userId, amount: o.amount, note: o.note, allow_negative: o.allowNegative };
      const data = await ctx.client().call('POST', '/api/ledger/adjust', { body });
      ctx.print(data, () => `Adjusted user ${o.userId} by ${o.amount} (ledger entry ${data.entry?.id}); balance now ${data.balance}.\n`);
    }));
}
