/**
 * `bun run --silent admin reset-root-password [--database-url sqlite:<path>] [--username <name>] [--password-stdin]`
 *
 * Offline recovery for a lost root password: works on the database directly, while no gateway runs on it
 * (it takes the same OS lock as a gateway, so it refuses while one holds the database, and a gateway
 * started meanwhile waits for nothing: it is refused). Sets the password (read from stdin, or generated
 * and printed once), lifts a login lock, and ends root's sessions and access tokens.
 */
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { ConfigError, DEFAULT_DATABASE_URL, parseSqliteUrl } from '@gw/config';
import { writableFileProblem } from '@gw/core';
import { DatabaseInUseError, createStores, openDatabase } from '@gw/db';
import { resetRootPassword } from '@gw/identity';
import type { CommandIo } from './db-copy';

const USAGE = 'usage: bun run --silent admin reset-root-password [--database-url sqlite:<path>] [--username <name>] [--password-stdin]';

export interface AdminIo extends CommandIo {
  /** Everything on standard input (for --password-stdin). */
  readStdin(): Promise<string>;
}

/** Runs an admin command; returns the process exit code (0 done, 1 refused or failed, 2 usage). */
export async function runAdmin(argv: string[], io: AdminIo, env: Record<string, string | undefined> = process.env): Promise<number> {
  let args: ReturnType<typeof parse>;
  try {
    args = parse(argv);
  } catch (e) {
    io.err(`${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  if (args.positionals[0] !== 'reset-root-password' || args.positionals.length !== 1) {
    io.err(USAGE);
    return 2;
  }
  let dbh: ReturnType<typeof openDatabase> | undefined;
  try {
    const url = args.values['database-url'] ?? (env.DATABASE_URL?.trim() || DEFAULT_DATABASE_URL);
    const path = parseSqliteUrl(url);
    if (path === ':memory:') throw new Error('an in-memory database cannot be reset offline');
    // Opening would create an empty database: a typo must not look like success.
    if (!existsSync(path)) throw new Error(`no database at ${path}`);
    const problem = writableFileProblem(path);
    if (problem) throw new Error(`cannot open database file ${path}: ${problem}`);
    const password = args.values['password-stdin'] ? (await io.readStdin()).replace(/\r?\n$/, '') : undefined;
    dbh = openDatabase(path, { checkpointMs: 0 });
    const stores = createStores(dbh);
    const r = await resetRootPassword(stores.users, stores.security, { username: args.values.username, password });
    const ended = `${r.sessionsEnded} session(s) ended, ${r.tokensRevoked} access token(s) revoked`;
    if (r.generatedPassword) {
      io.out(`root user '${r.username}': new password ${r.generatedPassword} (shown once); ${ended}`);
    } else {
      io.out(`root user '${r.username}': password set from stdin; ${ended}`);
    }
    return 0;
  } catch (e) {
    const msg = (e instanceof Error ? e.message : String(e)).replace(/\s+/g, ' ').trim();
    const hint = e instanceof ConfigError ? `DATABASE_URL: ${msg}` : e instanceof DatabaseInUseError ? `${msg}; stop it, then run this again` : msg;
    io.err(`reset-root-password failed: ${hint}`);
    return 1;
  } finally {
    dbh?.close();
  }
}

function parse(argv: string[]) {
  return parseArgs({
    args: argv, allowPositionals: true, strict: true,
    options: { 'database-url': { type: 'string' }, username: { type: 'string' }, 'password-stdin': { type: 'boolean' } },
  });
}

if (import.meta.main) {
  const code = await runAdmin(process.argv.slice(2), {
    out: (l) => process.stdout.write(l + '\n'),
    err: (l) => process.stderr.write(l + '\n'),
    readStdin: () => Bun.stdin.text(),
  });
  process.exit(code);
}
