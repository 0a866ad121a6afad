/**
 * Files at rest are readable by the gateway's user only: the data folder is created 0700 and every
 * file in it 0600. SQLite gives `-wal`, `-shm` and `-journal` files the mode of their database file,
 * so creating the database file 0600 before SQLite opens it covers them too; files left 0644 by an
 * older version are tightened at start-up.
 */
import { chmodSync, closeSync, constants, existsSync, fchmodSync, lstatSync, mkdirSync, openSync, writeSync, type Stats } from 'node:fs';

export const PRIVATE_FILE_MODE = 0o600;
export const PRIVATE_DIR_MODE = 0o700;

const { O_WRONLY, O_CREAT, O_EXCL, O_TRUNC, O_NOFOLLOW } = constants;

/**
 * The file at `path` (not following a link), or null when there is none. A symbolic link is refused:
 * in a shared data folder another user could point `<db>.lock.pid` at a file of ours, which start-up
 * would then chmod and overwrite. (A symlinked data *folder* is fine: only the last component is checked.)
 */
function ownFile(path: string): Stats | null {
  let st: Stats;
  try {
    st = lstatSync(path);
  } catch {
    return null;
  }
  if (st.isSymbolicLink()) throw new Error(`${path} is a symbolic link; the gateway does not follow links for its own files (move the real file there, or point DATABASE_URL at its folder)`);
  return st;
}

/**
 * Creates `path` empty with mode 0600 when it does not exist, else sets its mode to 0600. An existing
 * file is never opened: closing a descriptor would drop this process's POSIX locks on it (SQLite's).
 */
export function privateFile(path: string): void {
  if (ownFile(path)) chmodSync(path, PRIVATE_FILE_MODE);
  else closeSync(openSync(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, PRIVATE_FILE_MODE));
}

/** Tightens `path` to 0600 when it exists (companions SQLite may or may not have left behind). */
export function tightenIfPresent(path: string): void {
  if (ownFile(path)) chmodSync(path, PRIVATE_FILE_MODE);
}

/** Replaces the content of `path` (created 0600), never writing through a symbolic link. */
export function writePrivateFile(path: string, data: string): void {
  ownFile(path);
  const fd = openSync(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, PRIVATE_FILE_MODE);
  try {
    fchmodSync(fd, PRIVATE_FILE_MODE);
    writeSync(fd, data);
  } finally {
    closeSync(fd);
  }
}

/**
 * Creates a data folder (and missing parents) 0700. An existing folder keeps its mode: it may be
 * shared (e.g. /tmp), and the files the gateway puts in it are private on their own.
 */
export function privateDir(path: string): void {
  if (!existsSync(path)) mkdirSync(path, { recursive: true, mode: PRIVATE_DIR_MODE });
}
