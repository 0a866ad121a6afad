/**
 * One gateway process per database, enforced by an operating-system lock that dies with its holder.
 *
 * The lock is SQLite's own: a small dedicated file (`<db>.lock`) opened in exclusive locking mode
 * with a write transaction held for the life of the process. The kernel drops the byte-range lock
 * the moment the process exits for any reason (kill -9 included), so a restart never waits on a
 * stale owner, and a recycled pid can never be mistaken for a live one (the weakness of a pid file).
 * It needs no FFI (Bun has no flock API) and works wherever bun:sqlite works; the main database is
 * in WAL mode and shared with the checkpoint worker, so it cannot carry this lock itself.
 */
import { Database } from 'bun:sqlite';
import { existsSync, readFileSync } from 'node:fs';
import { privateFile, writePrivateFile } from './private-files';

export interface ProcessLock {
  readonly path: string;
  release(): void;
}

export class DatabaseInUseError extends Error {
  override name = 'DatabaseInUseError';
}

/** How long a start-up waits for a lock whose holder is still dying (kill -9 is asynchronous). */
const ACQUIRE_WAIT_MS = 1_000;
const RETRY_MS = 50;

/**
 * Takes the exclusive lock for the database at `dbPath`, or throws DatabaseInUseError with one line
 * naming the holder. `<db>.lock.pid` records the holder's pid for that message only; it is never
 * trusted for the decision.
 */
export function acquireProcessLock(dbPath: string): ProcessLock {
  const path = `${dbPath}.lock`;
  const pidFile = `${path}.pid`;
  privateFile(path);
  const deadline = Date.now() + ACQUIRE_WAIT_MS;
  for (;;) {
    const held = tryLock(path);
    if (held) {
      try {
        writePrivateFile(pidFile, String(process.pid));
      } catch (e) {
        held.close();
        throw e;
      }
      let released = false;
      return {
        path,
        release: () => {
          if (released) return;
          released = true;
          held.close();
        },
      };
    }
    if (Date.now() >= deadline) {
      const pid = existsSync(pidFile) ? readFileSync(pidFile, 'utf8').trim() : '';
      throw new DatabaseInUseError(`another gateway process${/^\d+$/.test(pid) ? ` (pid ${pid})` : ''} is using this database (${dbPath}); run one gateway process per database`);
    }
    Bun.sleepSync(RETRY_MS);
  }
}

/** Opens the lock file and holds an exclusive write transaction; null when another process holds it. */
function tryLock(path: string): Database | null {
  const db = new Database(path, { create: true });
  try {
    db.exec('PRAGMA busy_timeout = 0');
    db.exec('PRAGMA locking_mode = EXCLUSIVE');
    // Rollback journal, not WAL: in WAL mode an exclusive connection could still let readers in.
    db.exec('PRAGMA journal_mode = DELETE');
    db.exec('BEGIN EXCLUSIVE');
    return db;
  } catch (e) {
    db.close();
    if (/locked|busy/i.test((e as Error).message)) return null;
    throw e;
  }
}
