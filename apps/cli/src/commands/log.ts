/** `log`: usage logs (`/api/log/` for admins, `/api/log/self` for the caller's own). */
import type { Command } from 'commander';
import type { App } from '../core/context';
import { parseId, parseIntStrict, parseTime } from '../core/fields';
import { col, time } from '../core/output';
import { addScopedList, type Filter } from '../core/scoped-list';
import { registerLogExport } from './log-export';
import { registerLogStats } from './log-stats';

const COLUMNS = [
  col('ID', 'id', { right: true }), col('TIME', 'created_at', { fmt: time }), col('USER', 'user_id', { right: true }),
  col('KEY', 'api_key_id', { right: true }), col('CHANNEL', 'channel_id', { right: true }), col('MODEL', 'model'),
  col('STATUS', 'status', { right: true }), col('IN', 'input_tokens', { right: true }), col('OUT', 'output_tokens', { right: true }),
  col('CACHE R', 'cache_read_tokens', { right: true }), col('SEARCHES', 'web_search_requests', { right: true }),
  col('CODE EXEC', 'code_execution_requests', { right: true }), col('COST', 'cost', { right: true }),
  col('MS', 'latency_ms', { right: true }), col('ERROR', 'error_code'), col('REQUEST', 'request_id'),
];

const FILTERS: Filter[] = [
  { flags: '--user-id <id>', desc: 'only this user', query: 'user_id', parse: parseId, adminOnly: true },
  { flags: '--key-id <id>', desc: 'only this API key', query: 'token_id', parse: parseId },
  { flags: '--channel-id <id>', desc: 'only this channel', query: 'channel_id', parse: parseId, adminOnly: true },
  { flags: '--model <model>', desc: 'only this requested model', query: 'model' },
  { flags: '--status <code>', desc: 'only this HTTP status (100-599)', query: 'status', parse: parseIntStrict },
  { flags: '--from <time>', desc: 'from this time (unix seconds or ISO date), inclusive', query: 'start_timestamp', parse: parseTime },
  { flags: '--to <time>', desc: 'up to this time, inclusive', query: 'end_timestamp', parse: parseTime },
];

export function registerLog(program: Command, app: App): void {
  const group = program.command('log')
    .description('Usage logs: one row per metered request')
    .addHelpText('after', '\nExamples:\n  $ gw log list --model claude-sonnet-4 --from 2026-01-01\n  $ gw log stats --by model --from 2026-01-01\n  $ gw log export --format csv --out logs.csv');

  addScopedList(group, app, {
    what: 'usage logs', adminPath: '/api/log/', selfPath: '/api/log/self', columns: COLUMNS,
    // A cursor pages the listing only; the export is one keyset walk already.
    filters: [...FILTERS, { flags: '--cursor <cursor>', desc: 'rows after this next_cursor of the previous page (--json shows it): no repeats while new rows arrive', query: 'cursor' }],
    examples: ['gw log list --user-id 12 --status 429', 'gw log list --self --from 2026-11-01T00:00:00Z --page-size 100', 'gw log list --page-size 100 --cursor 1764400000.4711'],
  });
  registerLogStats(group, app);
  registerLogExport(group, app, FILTERS);
}
