import { Database } from 'bun:sqlite';
import { drizzle } from 'drizzle-orm/bun-sqlite';
import { migrate } from 'drizzle-orm/bun-sqlite/migrator';
import { dirname, join } from 'node:path';
import * as schema from './schema';
import { fsErrorCause, writableFileProblem } from '@gw/core';
import { DatabaseInUseError, acquireProcessLock, type ProcessLock } from './process-lock';
import { privateDir, privateFile, tightenIfPresent } from './private-files';

/** The database file cannot be opened; the message names the path and the cause, in one line. */
export class DatabaseOpenError extends Error {
  override name = 'DatabaseOpenError';
}

export type Db = ReturnType<typeof drizzle<typeof schema>>;

export interface DbHandle {
  db: Db;
  sqlite: Database;
  close(): void;
}

/** Folder with drizzle-kit's generated migrations (repo root /drizzle). */
export const MIGRATIONS_DIR = join(import.meta.dir, '..', '..', '..', 'drizzle');

/**
 * Opens the SQLite database and applies pending migrations.
 * WAL + synchronous=NORMAL: a committed transaction survives a process kill, and readers never
 * block the single writer.
 * A file database is first locked for this process (process-lock.ts: a second process is refused
 * with DatabaseInUseError) and its folder and files are made private (0700/0600) before SQLite
 * creates any of them.
 */
export function openDatabase(path: string, opts: { checkpointMs?: number } = {}): DbHandle {
  let lock: ProcessLock | null = null;
  let sqlite: Database;
  try {
    lock = path === ':memory:' ? null : prepareFiles(path);
    sqlite = new Database(path, { create: true, strict: true });
  } catch (e) {
    lock?.release();
    if (e instanceof DatabaseInUseError) throw e;
    // SQLite says only "unable to open database file": name the path and what is wrong with it.
    const cause = path === ':memory:' ? null : writableFileProblem(path);
    throw new DatabaseOpenError(`cannot open database file ${path}: ${cause ?? fsErrorCause(e)}`, { cause: e });
  }
  // The busy timeout first: even reading the journal mode needs a read lock, which another process's last
  // connection holds for a moment while it checkpoints and removes the WAL on close (db:copy right after a
  // writer closed the file failed with "database is locked" in CI).
  sqlite.exec('PRAGMA busy_timeout = 5000');
  sqlite.exec('PRAGMA journal_mode = WAL');
  sqlite.exec('PRAGMA synchronous = NORMAL');
  sqlite.exec('PRAGMA foreign_keys = ON');
  const db = drizzle({ client: sqlite, schema });
  migrate(db, { migrationsFolder: MIGRATIONS_DIR });
  const stopCheckpointer = path === ':memory:' || opts.checkpointMs === 0 ? null : startCheckpointer(sqlite, path, opts.checkpointMs ?? 500);
  return {
    db, sqlite,
    close: () => {
      stopCheckpointer?.();
      sqlite.close();
      lock?.release();
    },
  };
}

/** Private folder, the process lock, then the database file (0600) and its companions. */
function prepareFiles(path: string): ProcessLock {
  privateDir(dirname(path));
  const lock = acquireProcessLock(path);
  privateFile(path);
  for (const suffix of ['-wal', '-shm', '-journal']) tightenIfPresent(path + suffix);
  return lock;
}

/**
 * Moves WAL checkpoints (and their fsync) to a worker thread. The request thread's own
 * auto-checkpoint stays on at a high threshold as a backstop should the worker fall behind.
 */
function startCheckpointer(sqlite: Database, path: string, intervalMs: number): () => void {
  sqlite.exec('PRAGMA wal_autocheckpoint = 16384');
  const worker = new Worker(new URL('./checkpoint-worker.ts', import.meta.url).href);
  worker.postMessage({ path, intervalMs });
  worker.unref();
  return () => worker.terminate();
}
