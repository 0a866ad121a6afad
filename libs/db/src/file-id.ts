import { statSync } from 'node:fs';
/** The file at `path` (device and inode), or null when there is none. */
export function fileId(path: string): string | null {
  try {
    const st = statSync(path, { bigint: true });
    return `${st.dev}:${st.ino}`;
  } catch {
    return null;
  }
}
