/**
 * `log export`: usage logs as CSV or JSON Lines, streamed to stdout or a file as they arrive; with `--json` one JSON
 * array of the JSON Lines rows (the global promise of one JSON document: before, `--json` printed the CSV).
 */
import { randomBytes } from 'node:crypto';
import { accessSync, closeSync, constants, fchmodSync, lstatSync, openSync, readlinkSync, realpathSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
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
    // download began. A regular file is replaced only when the export arrived whole (see openOut).
    const out = opts.out === undefined ? null : openOut(opts.out);
    const fd = out?.fd ?? null;
    let res: Response;
    try {
      // The server builds the first page before it answers: that wait gets the export's idle limit, not 30 s.
      res = await ctx.client({ timeoutMs: idleMs }).stream(path, { query: { ...query, format } });
    } catch (e) {
      out?.abort();
      throw e;
    }
    const url = ctx.credentials().url;
    const chunks = bodyChunks(res, url, idleMs);
    let bytes = 0;
    // With --json the rows become one array, escaped like every --json output (no terminal blanking needed).
    const array = ctx.json ? jsonArrayOf(chunks, url, MAX_ANSWER_BYTES) : null;
    if (fd !== null) {
      try {
        for await (const chunk of array ? encoded(array) : chunks) { writeAll(fd, chunk); bytes += chunk.length; }
        out!.commit();
      } catch (e) {
        out!.abort();
        throw e;
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

/**
 * The --out file. A regular file (or one still to be made) is written as a temporary file beside it, created 0600
 * and never through a link (O_EXCL | O_NOFOLLOW), and renamed over it by `commit` only when the export arrived whole:
 * truncating it first left a cut download's partial file where the previous export was. `abort` removes the
 * temporary file. An existing file keeps its mode; a link (`latest.csv -> exports/2026.csv`) stays a link and its
 * target is replaced. Anything else (/dev/stdout, a pipe such as `--out >(gzip > u.gz)`) cannot be renamed over and
 * is written in place.
 */
interface OutFile { fd: number; commit(): void; abort(): void }
function openOut(path: string): OutFile {
  const { O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, W_OK } = constants;
  try {
    const target = finalPath(path);
    const existing = statSync(target, { throwIfNoEntry: false });
    if (existing && !existing.isFile()) {
      const fd = openSync(target, O_WRONLY);
      return { fd, commit: () => closeSync(fd), abort: () => closeSync(fd) };
    }
    // Renaming over a read-only file would succeed where writing it was refused before.
    if (existing) accessSync(target, W_OK);
    const tmp = `${target}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
    const fd = openSync(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600);
    if (existing) fchmodSync(fd, existing.mode & 0o7777);
    let open = true;
    const close = () => { if (open) { open = false; closeSync(fd); } };
    return {
      fd,
      commit: () => { close(); renameSync(tmp, target); },
      abort: () => { close(); rmSync(tmp, { force: true }); },
    };
  } catch (e) {
    throw new UsageError(`--out: cannot write ${path} (${(e as NodeJS.ErrnoException).code ?? String(e)})`);
  }
}

/** Where a write to `path` lands: the file a link points at (even one still to be made), else `path` itself. */
function finalPath(path: string): string {
  if (!lstatSync(path, { throwIfNoEntry: false })?.isSymbolicLink()) return path;
  try {
    return realpathSync(path);
  } catch {
    return resolve(dirname(path), readlinkSync(path)); // a dangling link: the file it names, made by this export
  }
}

async function* encoded(texts: AsyncIterable<string>): AsyncGenerator<Uint8Array> {
  const enc = new TextEncoder();
  for await (const t of texts) yield enc.encode(t);
}

function writeAll(fd: number, chunk: Uint8Array): void {
  for (let off = 0; off < chunk.length;) off += writeSync(fd, chunk, off);
}
