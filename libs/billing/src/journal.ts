/**
 * Write-ahead journal of settlements. A metered request is durable once its line is appended here
 * (a synchronous write: it survives a process kill, like SQLite's WAL with synchronous=NORMAL);
 * the database is then written in batches off the request path. Segments are deleted once their
 * batch committed, and replayed at start-up otherwise — idempotently, since a usage row is unique
 * by request id.
 */
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readdirSync, unlinkSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { SettlementRow } from '@gw/db';

const SEGMENT = /^settle-(\d+)\.jsonl$/;

export class SettlementJournal {
  private fd: number | null = null;
  private seq: number;
  private current = '';

  private readonly ownerFile: string;

  /**
   * Takes ownership of the journal folder: a second live gateway process on the same database would
   * replay (and delete) the segments the first one is still appending to, so it is refused.
   */
  constructor(private readonly dir: string) {
    mkdirSync(dir, { recursive: true });
    this.ownerFile = join(dir, 'owner.pid');
    const owner = existsSync(this.ownerFile) ? Number(readFileSync(this.ownerFile, 'utf8')) : 0;
    if (owner && owner !== process.pid && isAlive(owner)) {
      throw new Error(`another gateway process (pid ${owner}) is using this database; run one gateway process per database`);
    }
    writeFileSync(this.ownerFile, String(process.pid), { mode: 0o600 });
    this.seq = Math.max(0, ...this.segments().map((s) => s.seq)) + 1;
  }

  private segments(): Array<{ seq: number; path: string }> {
    return readdirSync(this.dir).flatMap((f) => {
      const m = SEGMENT.exec(f);
      return m ? [{ seq: Number(m[1]), path: join(this.dir, f) }] : [];
    }).sort((a, b) => a.seq - b.seq);
  }

  /** Appends one settlement; when this returns, a kill of the process cannot lose it. */
  append(row: SettlementRow): void {
    if (this.fd === null) {
      this.current = join(this.dir, `settle-${this.seq++}.jsonl`);
      this.fd = openSync(this.current, 'a', 0o600);
    }
    writeSync(this.fd, `${JSON.stringify(row)}\n`);
  }

  /** Closes the open segment and returns its path (null when nothing was appended since the last seal). */
  seal(): string | null {
    if (this.fd === null) return null;
    closeSync(this.fd);
    this.fd = null;
    return this.current;
  }

  /** Deletes a sealed segment whose settlements are committed to the database. */
  discard(path: string): void {
    if (existsSync(path)) unlinkSync(path);
  }

  /**
   * Settlements of segments left by a previous process (crash or kill), oldest first. A torn last
   * line (the kill landed mid-write) was never acknowledged to anyone and is skipped.
   */
  leftovers(): Array<{ path: string; rows: SettlementRow[] }> {
    return this.segments().filter((s) => s.path !== this.current).map(({ path }) => ({
      path,
      rows: readFileSync(path, 'utf8').split('\n').flatMap((line) => {
        if (!line.trim()) return [];
        try {
          return [JSON.parse(line) as SettlementRow];
        } catch {
          return [];
        }
      }),
    }));
  }

  /** Closes the open segment and gives up ownership; call after the last flush. */
  close(): void {
    this.seal();
    if (existsSync(this.ownerFile) && Number(readFileSync(this.ownerFile, 'utf8')) === process.pid) unlinkSync(this.ownerFile);
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: it exists but belongs to someone else — still alive.
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
