/** `log`: usage logs (`/api/log/` for admins, `/api/log/self` for the caller's own). */
import { Option, type Command } from 'commander';
import type { App } from '../core/context';
import { addPaging, pagingQuery, parseId, parseIntStrict, parseTime } from '../core/fields';
import { col, pageText, time } from '../core/output';

const COLUMNS = [
  col('ID', 'id', { right: true }), col('TIME', 'created_at', { fmt: time }), col('USER', 'user_id', { right: true }),
  col('KEY', 'api_key_id', { right: true }), col('CHANNEL', 'channel_id', { right: true }), col('MODEL', 'model'),
  col('STATUS', 'status', { right: true }), col('IN', 'input_tokens', { right: true }), col('OUT', 'output_tokens', { right: true }),
  col('CACHE R', 'cache_read_tokens', { right: true }), col('COST', 'cost', { right: true }),
  col('MS', 'latency_ms', { right: true }), col('ERROR', 'error_code'), col('REQUEST', 'request_id'),
];

export function registerLog(program: Command, app: App): void {
  const group = program.command('log')
    .description('Usage logs: one row per metered request')
    .addHelpText('after', '\nExamples:\n  $ gw log list --model claude-sonnet-4 --from 2026-01-01\n  $ gw log list --self --json');

  addPaging(group.command('list')
    .description('List usage logs (all users for admins; --self for your own)')
    .option('--self', 'only your own requests (any role)')
    .addOption(new Option('--user-id <id>', 'only this user (admins)').argParser(parseId))
    .addOption(new Option('--key-id <id>', 'only this API key').argParser(parseId))
    .addOption(new Option('--channel-id <id>', 'only this channel (admins)').argParser(parseId))
    .option('--model <model>', 'only this requested model')
    .addOption(new Option('--status <code>', 'only this HTTP status').argParser(parseIntStrict))
    .addOption(new Option('--from <time>', 'from this time (unix seconds or ISO date), inclusive').argParser(parseTime))
    .addOption(new Option('--to <time>', 'up to this time, inclusive').argParser(parseTime)))
    .addHelpText('after', '\nExamples:\n  $ gw log list --user-id 12 --status 429\n  $ gw log list --self --from 2026-11-01T00:00:00Z --page-size 100')
    .action(app.action(async (ctx, _a, o) => {
      const data = await ctx.client().call('GET', o.self ? '/api/log/self' : '/api/log/', {
        query: {
          ...pagingQuery(o), token_id: o.keyId, model: o.model, status: o.status, start_timestamp: o.from, end_timestamp: o.to,
          // Only the admin list filters by user and channel; /self has neither.
          ...(o.self ? {} : { user_id: o.userId, channel_id: o.channelId }),
        },
      });
      ctx.print(data, () => pageText(data, COLUMNS));
    }));
}
