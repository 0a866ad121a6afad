/**
 * Files at rest are readable by the gateway's user only: the data folder is created 0700 and every
 * file in it 0600. SQLite gives `-wal`, `-shm` and `-journal` files the mode of their database file,
 * so creating the database file 0600 before SQLite opens it covers them too; files left 0644 by an
 * older version are tightened at start-up.
 */
import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from 'node:fs';

export const PRIVATE_FILE_MODE = 0o600;
export const PRIVATE_DIR_MODE = 0o700;

/**
 * Creates `path` empty with mode 0600 when it does not exist, else sets its mode to 0600. An existing
 * file is never opened: closing a descriptor would drop this process's POSIX locks on it (SQLite's).
 */
export function privateFile(path: string): void {
  if (existsSync(path)) chmodSync(path, PRIVATE_FILE_MODE);
  else closeSync(openSync(path, 'a', PRIVATE_FILE_MODE));
}

/** Tightens `path` to 0600 when it exists (companions SQLite may or may not have left behind). */
export function tightenIfPresent(path: string): void {
  if (existsSync(path)) chmodSync(path, PRIVATE_FILE_MODE);
}

/**
 * Creates a data folder (and missing parents) 0700. An existing folder keeps its mode: it may be
 * shared (e.g. /tmp), and the files the gateway puts in it are private on their own.
 */
export function privateDir(path: string): void {
  if (!existsSync(path)) mkdirSync(path, { recursive: true, mode: PRIVATE_DIR_MODE });
}
