/**
 * Write-ahead journal of settlements. A metered request is durable once its line is appended here
 * (a synchronous write: it survives a process kill, like SQLite's WAL with synchronous=NORMAL);
 * the database is then written in batches off the request path. A segment stays open across
 * batches until it holds `segmentBytes`; it is then sealed and deleted once the batch that sealed
 * it committed. Whatever is on disk at start-up is replayed — idempotently, since a usage row is
 * unique by request id, so rows of a segment that were already committed are skipped.
 * (One file per batch cost a create and an unlink on the event loop every BILLING_FLUSH_MS, the
 * unlink now and then for milliseconds: measured in bench/tail.ts runs.)
 */
import { chmodSync, closeSync, constants, existsSync, lstatSync, mkdirSync, openSync, readFileSync, readdirSync, unlink, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { SettlementRow } from '@gw/db';

const SEGMENT = /^settle-(\d+)\.jsonl$/;

/** Default size at which a segment is sealed: about 1,500 settlements, replayed in well under a second. */
export const JOURNAL_SEGMENT_BYTES = 1 << 20;

export class SettlementJournal {
  private fd: number | null = null;
  private seq: number;
  private current = '';
  private bytes = 0;

  /**
   * A second live gateway process would replay (and delete) the segments the first one is still
   * appending to. The database's process lock (openDatabase) rules that out before the journal
   * is opened: the folder belongs to whoever holds it.
   */
  constructor(private readonly dir: string, private readonly segmentBytes = JOURNAL_SEGMENT_BYTES) {
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
    this.bytes += writeSync(this.fd, `${JSON.stringify(row)}\n`);
  }

  /**
   * Before a batch is written: seals the open segment if it is full (or `force`) and returns its path,
   * to discard once the batch committed; null = keep appending to it (its rows replay as no-ops).
   */
  rotate(force = false): string | null {
    if (this.fd === null || (!force && this.bytes < this.segmentBytes)) return null;
    closeSync(this.fd);
    this.fd = null;
    this.bytes = 0;
    return this.current;
  }

  /**
   * Deletes a sealed segment whose settlements are committed to the database, off the event loop
   * (`wait`: at once). Should the process die first, the segment replays as no-ops.
   */
  discard(path: string, wait = false): void {
    if (wait) unlinkIfPresent(path);
    else unlink(path, () => { /* gone already, or left to replay: both harmless */ });
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

  /** Closes and deletes the open segment; call after the last flush (everything in it is committed). */
  close(): void {
    const last = this.rotate(true);
    if (last) this.discard(last, true);
  }
}

function unlinkIfPresent(path: string): void {
  if (existsSync(path)) unlinkSync(path);
}
