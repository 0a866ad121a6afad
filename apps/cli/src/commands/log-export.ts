/**
 * `log export`: usage logs as CSV or JSON Lines, streamed to stdout or a file as they arrive; with `--json` one JSON
 * array of the JSON Lines rows (the global promise of one JSON document: before, `--json` printed the CSV).
 */
import { closeSync, constants, fstatSync, ftruncateSync, openSync, unlinkSync, writeSync } from 'node:fs';
import type { Command } from 'commander';
import { MAX_ANSWER_BYTES, bodyChunks } from '../core/client';
import type { App } from '../core/context';
import { UsageError } from '../core/errors';
import { jsonArrayOf } from '../core/json-array';
import { jsonText } from '../core/output';
import { apiParams } from '../core/params';
import { addFilters, scopedQuery, type Filter } from '../core/scoped-list';

export function registerLogExport(group: Command, app: App, filters: Filter[]): void {
  const cmd = group.command('export')
    .description('Export usage logs (oldest first) as CSV or JSON Lines, streamed')
    .option('--format <format>', 'csv (with a header row) or jsonl; with --json the rows are one JSON array', 'csv')
    .option('--out <file>', 'write to this file instead of stdout')
    .option('--self', 'only your own (the default for non-admins)');
  const options = addFilters(cmd, filters);
  apiParams(cmd, Object.fromEntries(options.map(({ f, o }) => [f.query, { flag: o.long!, values: f.choices?.join(', ') }])));
  cmd.addHelpText('after', '\nExamples:\n  $ gw log export --from 2026-01-01 --out usage-2026.csv\n  $ gw log export --self --format jsonl | jq .cost\n  $ gw log export --self --json | jq \'map(.cost) | add\'');
  cmd.action(app.action(async (ctx, _a, opts) => {
    if (!['csv', 'jsonl'].includes(opts.format)) throw new UsageError("--format must be 'csv' or 'jsonl'");
    // --json is one JSON document (an array of the JSON Lines rows); a CSV asked for by name cannot also be that.
    if (ctx.json && opts.format === 'csv' && cmd.getOptionValueSource('format') !== 'default') throw new UsageError('--json prints the rows as a JSON array: drop --format csv, or drop --json for CSV');
    const format = ctx.json ? 'jsonl' : opts.format;
    const idleMs = exportIdleMs(ctx.io.env.GW_EXPORT_IDLE_MS);
    const { path, query } = await scopedQuery(ctx, { what: 'usage logs', adminPath: '/api/log/export', selfPath: '/api/log/export/self' }, options, opts);
    // Opened before anything is fetched: a path that cannot be written is a usage error (2), not a failure after the
    // download began. Mode 0600 for a new file, as other users' usage is in it; an existing file keeps its mode, and
    // its content until the server answers with the export (an expired token must not leave yesterday's export empty).
    const out = opts.out === undefined ? null : openOut(opts.out);
    const fd = out?.fd ?? null;
    let res: Response;
    try {
      // The server builds the first page before it answers: that wait gets the export's idle limit, not 30 s.
      res = await ctx.client({ timeoutMs: idleMs }).stream(path, { query: { ...query, format } });
    } catch (e) {
      if (out) {
        closeSync(out.fd);
        if (out.created) unlinkSync(opts.out);
      }
      throw e;
    }
    // Only a regular file has content to replace: /dev/stdout, a pipe (`--out >(gzip > u.gz)`) or /dev/null refuse a
    // truncate (EINVAL) and are written as they are.
    if (out && !out.created && fstatSync(out.fd).isFile()) ftruncateSync(out.fd, 0);
    const url = ctx.credentials().url;
    const chunks = bodyChunks(res, url, idleMs);
    let bytes = 0;
    // With --json the rows become one array, escaped like every --json output (no terminal blanking needed).
    const array = ctx.json ? jsonArrayOf(chunks, url, MAX_ANSWER_BYTES) : null;
    if (fd !== null) {
      try {
        for await (const chunk of array ? encoded(array) : chunks) { writeAll(fd, chunk); bytes += chunk.length; }
      } finally {
        closeSync(fd);
      }
      // --json: stdout still holds one document, saying where the array went.
      if (ctx.json) ctx.io.out(`${jsonText({ out: opts.out, bytes })}\n`);
      else ctx.io.err(`Wrote ${bytes} bytes to ${opts.out}.\n`);
    } else if (array) {
      for await (const text of array) {
        ctx.io.out(text);
        await ctx.io.drained?.();
      }
    } else {
      const dec = new TextDecoder();
      for await (const chunk of chunks) {
        ctx.raw(dec.decode(chunk, { stream: true }));
        // Read on only as fast as stdout's reader takes it: the export is not piled up in memory.
        await ctx.io.drained?.();
      }
      ctx.raw(dec.decode());
    }
  }));
}

/**
 * Longest wait for the next bytes of an export. An export page may queue for a history slot and run up to
 * HISTORY_QUERY_TIMEOUT_MS (on PostgreSQL about twice that), so a minute of silence is normal under load; five
 * minutes is a stalled server, and a script must not wait for it forever.
 */
const EXPORT_IDLE_MS = 300_000;
const MAX_TIMER_MS = 2 ** 31 - 1;

/** GW_EXPORT_IDLE_MS: a positive whole number of milliseconds, else the default (a typo must not mean "no limit"). */
function exportIdleMs(raw: string | undefined): number {
  if (raw === undefined || raw === '') return EXPORT_IDLE_MS;
  // Timers wrap past 2^31 - 1 ms (about 24.8 days) to 1 ms: a larger value would end the export at once.
  const ms = /^[1-9]\d{0,9}$/.test(raw) ? Number(raw) : 0;
  if (!ms || ms > MAX_TIMER_MS) throw new UsageError(`GW_EXPORT_IDLE_MS must be a whole number of milliseconds (1..${MAX_TIMER_MS})`);
  return ms;
}

/** The --out file, opened for writing and not yet truncated; `created`: it did not exist (removed again on failure). */
function openOut(path: string): { fd: number; created: boolean } {
  const { O_WRONLY, O_CREAT, O_EXCL } = constants;
  try {
    try {
      return { fd: openSync(path, O_WRONLY | O_CREAT | O_EXCL, 0o600), created: true };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      // It exists, or is a link to a file still to be made (`latest.csv -> exports/2026.csv`), which O_EXCL never follows.
      return { fd: openSync(path, O_WRONLY | O_CREAT, 0o600), created: false };
    }
  } catch (e) {
    throw new UsageError(`--out: cannot write ${path} (${(e as NodeJS.ErrnoException).code ?? String(e)})`);
  }
}

async function* encoded(texts: AsyncIterable<string>): AsyncGenerator<Uint8Array> {
  const enc = new TextEncoder();
  for await (const t of texts) yield enc.encode(t);
}

function writeAll(fd: number, chunk: Uint8Array): void {
  for (let off = 0; off < chunk.length;) off += writeSync(fd, chunk, off);
}
