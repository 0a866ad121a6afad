/** `log export`: usage logs as CSV or JSON Lines, streamed to stdout or a file as they arrive. */
import type { Command } from 'commander';
import type { App } from '../core/context';
import { UsageError } from '../core/errors';
import { apiParams } from '../core/params';
import { addFilters, scopedQuery, type Filter } from '../core/scoped-list';

export function registerLogExport(group: Command, app: App, filters: Filter[]): void {
  const cmd = group.command('export')
    .description('Export usage logs (oldest first) as CSV or JSON Lines, streamed')
    .option('--format <format>', 'csv (with a header row) or jsonl', 'csv')
    .option('--out <file>', 'write to this file instead of stdout')
    .option('--self', 'only your own (the default for non-admins)');
  const options = addFilters(cmd, filters);
  apiParams(cmd, Object.fromEntries(options.map(({ f, o }) => [f.query, { flag: o.long!, values: f.choices?.join(', ') }])));
  cmd.addHelpText('after', '\nExamples:\n  $ gw log export --from 2026-01-01 --out usage-2026.csv\n  $ gw log export --self --format jsonl | jq .cost');
  cmd.action(app.action(async (ctx, _a, opts) => {
    if (!['csv', 'jsonl'].includes(opts.format)) throw new UsageError("--format must be 'csv' or 'jsonl'");
    const { path, query } = await scopedQuery(ctx, { what: 'usage logs', adminPath: '/api/log/export', selfPath: '/api/log/export/self' }, options, opts);
    const res = await ctx.client().stream(path, { query: { ...query, format: opts.format } });
    const reader = res.body!.getReader();
    let bytes = 0;
    if (opts.out) {
      const sink = Bun.file(opts.out).writer();
      for (let r = await reader.read(); !r.done; r = await reader.read()) { sink.write(r.value); bytes += r.value.length; await sink.flush(); }
      await sink.end();
      ctx.io.err(`Wrote ${bytes} bytes to ${opts.out}.\n`);
    } else {
      const dec = new TextDecoder();
      for (let r = await reader.read(); !r.done; r = await reader.read()) ctx.raw(dec.decode(r.value, { stream: true }));
      ctx.raw(dec.decode());
    }
  }));
}
