/**
 * Why a file cannot be opened for writing, in the words an operator acts on ("is a directory",
 * "permission denied", "parent folder missing"). SQLite only ever says "unable to open database file";
 * start-up and the offline commands name the path and one of these causes instead.
 */
import { accessSync, constants, existsSync, statSync } from 'node:fs';
import { dirname } from 'node:path';

/** The cause behind a filesystem errno, or the error's own message when it is something else. */
export function fsErrorCause(e: unknown): string {
  switch ((e as NodeJS.ErrnoException)?.code) {
    case 'EISDIR': return 'is a directory';
    case 'EACCES': case 'EPERM': return 'permission denied';
    case 'ENOENT': return 'parent folder missing';
    case 'ENOTDIR': return 'a parent is not a directory';
    case 'EROFS': return 'read-only file system';
    case 'ENOSPC': return 'no space left on device';
    default: return (e instanceof Error ? e.message : String(e)).replace(/\s+/g, ' ').trim();
  }
}

/**
 * What stands in the way of reading and writing the file at `path` (created with its missing parent
 * folders when `createParents`), or null when nothing visible does. Checks the file itself, then the
 * nearest existing ancestor folder, with the permissions of this process.
 */
export function writableFileProblem(path: string, opts: { createParents?: boolean } = {}): string | null {
  try {
    const st = statSync(path);
    if (st.isDirectory()) return 'is a directory';
    accessSync(path, constants.R_OK | constants.W_OK);
    return null;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') return fsErrorCause(e);
  }
  let dir = dirname(path);
  const parentMissing = !existsSync(dir);
  if (parentMissing && !opts.createParents) return `parent folder missing (${dir})`;
  while (!existsSync(dir) && dirname(dir) !== dir) dir = dirname(dir);
  try {
    if (!statSync(dir).isDirectory()) return `a parent is not a directory (${dir})`;
    accessSync(dir, constants.W_OK | constants.X_OK);
    return null;
  } catch (e) {
    const cause = fsErrorCause(e);
    return cause === 'permission denied' ? `permission denied on folder ${dir}` : cause;
  }
}
