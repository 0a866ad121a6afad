/** `budget`: periodic spending budgets of users and keys (`/api/budget/`), low-balance alerts, the alert outbox. */
import { Option, type Command } from 'commander';
import type { App } from '../core/context';
import { UsageError } from '../core/errors';
import { parseId, parseIntStrict } from '../core/fields';
import { col, pageText, table, time } from '../core/output';

const COLUMNS = [
  col('ID', 'id', { right: true }), col('SCOPE', 'scope'), col('SUBJECT', 'subject_id', { right: true }), col('USER', 'user_id', { right: true }),
  col('PERIOD', 'period'), col('CURRENT', 'period_key'), col('LIMIT', 'limit', { right: true }), col('SPENT', 'spent', { right: true }),
  col('IN FLIGHT', 'held', { right: true }), col('LEFT', 'remaining', { right: true }), col('ALERTED', 'alerted'), col('RESETS', 'resets_at', { fmt: time }),
];
const ALERT_COLUMNS = [
  col('ID', 'id', { right: true }), col('TIME', 'created_at', { fmt: time }), col('TYPE', 'type'), col('STATUS', 'status'),
  col('ATTEMPTS', 'attempts', { right: true }), col('EVENT', 'event_id'), col('LAST ERROR', 'last_error'),
];

const overviewText = (d: any) => `${d.budgets.length ? table(d.budgets, COLUMNS) : '(no budgets)\n'}low-balance alert: ${d.low_balance_threshold ?? 'off'}\n`;

export function registerBudget(program: Command, app: App): void {
  const group = program.command('budget')
    .description('Daily/monthly budgets of users and keys (UTC periods), low-balance alerts, alert deliveries')
    .addHelpText('after', '\nExamples:\n  $ gw budget set --user 12 --period monthly --limit 50000000\n  $ gw budget show');

  group.command('show')
    .description("Your budgets and your keys' budgets with the current spend (admins: --user-id for someone else's)")
    .addOption(new Option('--user-id <id>', "admins: this user's budgets").argParser(parseId))
    .addHelpText('after', '\nExamples:\n  $ gw budget show\n  $ gw budget show --user-id 12 --json')
    .action(app.action(async (ctx, _a, o) => {
      const data = await ctx.client().call('GET', o.userId ? `/api/budget/user/${o.userId}` : '/api/budget/self');
      ctx.print(data, () => overviewText(data));
    }));

  group.command('list')
    .description('Every budget (admin)')
    .addOption(new Option('--scope <scope>', 'only user or key budgets').choices(['user', 'key']))
    .addOption(new Option('--subject-id <id>', 'only this user or key id').argParser(parseId))
    .addHelpText('after', '\nExample:\n  $ gw budget list --scope key')
    .action(app.action(async (ctx, _a, o) => {
      const data = await ctx.client().call('GET', '/api/budget/', { query: { scope: o.scope, subject_id: o.subjectId } });
      ctx.print(data, () => (data.length ? table(data, COLUMNS) : '(none)\n'));
    }));

  group.command('set')
    .description("Set (create or replace) a user's budget (admin) or a key's budget (its owner or an admin)")
    .addOption(new Option('--user <id>', 'budget of this user (all their keys together)').argParser(parseId).conflicts('key'))
    .addOption(new Option('--key <id>', 'budget of this API key').argParser(parseId))
    .addOption(new Option('--period <period>', 'UTC calendar day or month').choices(['daily', 'monthly']).makeOptionMandatory())
    .addOption(new Option('--limit <n>', 'quota units per period').argParser(parseId).makeOptionMandatory())
    .addHelpText('after', '\nExamples:\n  $ gw budget set --user 12 --period daily --limit 2000000\n  $ gw budget set --key 40 --period monthly --limit 50000000')
    .action(app.action(async (ctx, _a, o) => {
      if (!o.user && !o.key) throw new UsageError('give --user <id> or --key <id>');
      const body = { scope: o.user ? 'user' : 'key', subject_id: o.user ?? o.key, period: o.period, limit: o.limit };
      const data = await ctx.client().call('PUT', '/api/budget/', { body });
      ctx.print(data, () => `Budget ${data.id}: ${data.period} ${data.limit} for ${data.scope} ${data.subject_id}; ${data.spent} spent in ${data.period_key}.\n`);
    }));

  group.command('clear')
    .description('Remove a budget (same rights as setting it)')
    .argument('<id>', 'budget id (from budget show/list)', parseId)
    .addHelpText('after', '\nExample:\n  $ gw budget clear 3')
    .action(app.action(async (ctx, [id]) => {
      const data = await ctx.client().call('DELETE', `/api/budget/${id}`);
      ctx.print(data, () => `Cleared budget ${id}.\n`);
    }));

  group.command('low-balance')
    .description('Alert when a charge takes the balance below <threshold> quota units (0: off)')
    .argument('<threshold>', 'quota units; 0 turns the alert off', parseIntStrict)
    .addOption(new Option('--user-id <id>', "admins: another user's alert").argParser(parseId))
    .addHelpText('after', '\nExamples:\n  $ gw budget low-balance 1000000\n  $ gw budget low-balance 0 --user-id 12')
    .action(app.action(async (ctx, [threshold], o) => {
      const data = await ctx.client().call('PUT', '/api/budget/low_balance', { body: { threshold, user_id: o.userId } });
      ctx.print(data, () => `Low-balance alert of user ${data.user_id}: ${data.low_balance_threshold ?? 'off'}.\n`);
    }));

  group.command('alerts')
    .description('Alerts written by charges and their webhook delivery (admin)')
    .addOption(new Option('--status <status>', 'only this delivery state').choices(['pending', 'delivered', 'failed', 'skipped']))
    .option('--page <n>', 'page (1-based)', parseId)
    .addHelpText('after', '\nExample:\n  $ gw budget alerts --status failed')
    .action(app.action(async (ctx, _a, o) => {
      const data = await ctx.client().call('GET', '/api/budget/alerts', { query: { status: o.status, p: o.page } });
      ctx.print(data, () => pageText(data, ALERT_COLUMNS));
    }));
}
