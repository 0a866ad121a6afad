/**
 * `[SECRET_KEY=…] bun run db:copy --from sqlite:./data/gateway.db --to postgres://… [--schema s] [--force]`
 *
 * Copies a gateway's SQLite database into PostgreSQL (ids kept, sequences advanced). It lives with
 * the server, not in apps/cli, because it works on the server's storage directly and offline; the
 * CLI is a client of the HTTP management API and never opens a database.
 */
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { openDatabase } from '@gw/db';
import { copySqliteToPostgres, openPostgres } from '@gw/db/pg';
import { journalDirOf, journaledSettlements } from '@gw/billing';
import { checkSealedKey } from './copy-key';

const USAGE = 'usage: bun run db:copy --from sqlite:<path> --to postgres://… [--schema <name>] [--force]';

export interface CommandIo {
  out(line: string): void;
  err(line: string): void;
}

/** Runs the copy; returns the process exit code. Every failure is one line on `err`. */
export async function runDbCopy(argv: string[], io: CommandIo, env: Record<string, string | undefined> = process.env): Promise<number> {
  let src: ReturnType<typeof openDatabase> | undefined;
  let dst: Awaited<ReturnType<typeof openPostgres>> | undefined;
  try {
    const { values } = parseArgs({
      args: argv,
      options: { from: { type: 'string' }, to: { type: 'string' }, schema: { type: 'string' }, force: { type: 'boolean' } },
      strict: true,
    });
    if (!values.from || !values.to) throw new Error(USAGE);
    const path = /^sqlite:(.+)$/.exec(values.from)?.[1];
    if (!path || path === ':memory:') throw new Error(`--from must be sqlite:<path to a database file>, got "${values.from}"`);
    // openDatabase would create a missing file: an empty copy is never what was meant.
    if (!existsSync(path)) throw new Error(`no SQLite database at ${path}`);
    if (!/^postgres(ql)?:\/\//.test(values.to)) throw new Error('--to must be a postgres:// or postgresql:// URL');
    // Opening takes the gateway's process lock: no SQLite gateway runs on the file until the copy is done.
    src = openDatabase(path, { checkpointMs: 0 });
    refuseUnbilled(path, src);
    const sealedNote = checkSealedKey(path, src, env);
    if (sealedNote) io.err(sealedNote);
    dst = await openPostgres(values.to, { schema: values.schema, max: 2 });
    // Counts are printed after the commit: before it, nothing is in the target yet.
    const counts = await copySqliteToPostgres(src, dst, { force: values.force });
    for (const [table, rows] of Object.entries(counts)) io.out(`${table.padEnd(20)} ${rows}`);
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    io.out(`copied ${total} rows into schema "${dst.schema}"`);
    return 0;
  } catch (e) {
    io.err(`db copy failed: ${oneLine(e)}`);
    return 1;
  } finally {
    src?.close();
    await dst?.close().catch(() => {});
  }
}

/**
 * A SQLite gateway that was killed (not stopped) leaves charges only its own next start writes: settlements in its
 * journal and checkpoints of the streams it was running (realtime_unfinished). PostgreSQL nodes read neither, so a
 * copy taken then would never bill them.
 */
function refuseUnbilled(path: string, src: ReturnType<typeof openDatabase>): void {
  const journaled = journaledSettlements(journalDirOf(path));
  const { n: running } = src.sqlite.query('select count(*) as n from realtime_unfinished').get() as { n: number };
  if (!journaled && !running) return;
  const what = [journaled && `${journaled} journaled charge(s) in ${journalDirOf(path)}`, running && `${running} running stream(s) in realtime_unfinished`].filter(Boolean).join(' and ');
  throw new Error(`the SQLite gateway did not stop cleanly: ${what} not yet billed in the database; start the gateway on it once (its start-up bills them), stop it with SIGTERM, then copy`);
}

function oneLine(e: unknown): string {
  const msg = e instanceof Error ? e.message : String(e);
  return msg.replace(/\s+/g, ' ').trim();
}

if (import.meta.main) {
  const code = await runDbCopy(process.argv.slice(2), { out: (l) => console.log(l), err: (l) => console.error(l) });
  process.exit(code);
}
