/**
 * Write-ahead journal of settlements. A metered request is durable once its line is appended here
 * (a synchronous write: it survives a process kill, like SQLite's WAL with synchronous=NORMAL);
 * the database is then written in batches off the request path. Segments are deleted once their
 * batch committed, and replayed at start-up otherwise — idempotently, since a usage row is unique
 * by request id.
 */
import { chmodSync, closeSync, constants, existsSync, lstatSync, mkdirSync, openSync, readFileSync, readdirSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { SettlementRow } from '@gw/db';

const SEGMENT = /^settle-(\d+)\.jsonl$/;

export class SettlementJournal {
  private fd: number | null = null;
  private seq: number;
  private current = '';

  /**
   * A second live gateway process would replay (and delete) the segments the first one is still
   * appending to. The database's process lock (openDatabase) rules that out before the journal
   * is opened: the folder belongs to whoever holds it.
   */
  constructor(private readonly dir: string) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    // A folder left open (or planted) by someone else is made ours alone; a link to elsewhere is refused.
    if (lstatSync(dir).isSymbolicLink()) throw new Error(`${dir} is a symbolic link; the settlement journal does not follow links`);
    chmodSync(dir, 0o700);
    unlinkIfPresent(join(dir, 'owner.pid')); // the pid file of earlier versions, no longer consulted
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
      // O_NOFOLLOW: a segment name planted as a link must not make us append settlements to another file.
      this.fd = openSync(this.current, constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW, 0o600);
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

  /** Closes the open segment; call after the last flush. */
  close(): void {
    this.seal();
  }
}

function unlinkIfPresent(path: string): void {
  if (existsSync(path)) unlinkSync(path);
}
