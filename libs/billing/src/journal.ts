/**
 * Write-ahead journal of settlements. A metered request is durable once its line is in a segment here
 * (it survives a process kill, like SQLite's WAL with synchronous=NORMAL); the database is then written
 * in batches off the request path. A segment is a file of `segmentBytes` zeros mapped into memory
 * (`Bun.mmap`, MAP_SHARED): appending a line is a copy into the file's pages, which the kernel owns, so
 * the line outlives the process the moment the copy returns, without a system call per settlement (a
 * `writeSync` per line cost 5–6 µs, about a tenth of a request's main-thread time). The zeros are written
 * when the segment is made, so its blocks are allocated then: a full disk fails that write (a clear
 * error) rather than a later page fault. A segment that cannot take the next line is sealed and a new one
 * starts; sealed segments are deleted once the batch that holds their last lines committed. Whatever is on
 * disk at start-up is replayed — idempotently, since a usage row is unique by request id, so rows of a
 * segment that were already committed are skipped.
 */
import { chmodSync, closeSync, constants, existsSync, lstatSync, mkdirSync, openSync, readFileSync, readdirSync, renameSync, truncate, unlink, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { jsonLine } from '@gw/core';
import type { SettlementRow } from '@gw/db';

const SEGMENT = /^settle-(\d+)\.jsonl$/;

/** The journal folder of the SQLite database at `dbPath`. */
export const journalDirOf = (dbPath: string): string => `${dbPath}.settlements`;

/**
 * How many settlements the segments in `dir` hold (none when there is no folder): charges a killed process
 * journaled and its next start replays. Read only: no folder is made and nothing is replayed or removed.
 */
export function journaledSettlements(dir: string): number {
  if (!existsSync(dir)) return 0;
  return readdirSync(dir).filter((f) => SEGMENT.test(f)).reduce((n, f) => n + linesOf(readFileSync(join(dir, f), 'utf8')).length, 0);
}

/** Default segment size: about 3,000 settlements, replayed in well under a second. */
export const JOURNAL_SEGMENT_BYTES = 1 << 20;

export class SettlementJournal {
  /** The open segment: its path, its mapping (a Buffer over the file's pages) and the next free byte. */
  private current = '';
  private map: Buffer | null = null;
  private pos = 0;
  private seq: number;
  /** Segments sealed since the last rotate(), to delete once the next batch committed. */
  private sealed: string[] = [];
  /** The mappings of sealed segments, by path, until they are discarded. */
  private readonly mapped = new Map<string, Buffer>();
  /**
   * One discarded segment, emptied, kept to become the next one: a fresh segment's pages each cost a page
   * fault at their first write, tens of µs apiece on a busy virtual machine (the first version, which made
   * every segment anew, cost more per line than the writeSync it replaced: bench/journal.ts).
   */
  private spare: { path: string; map: Buffer } | null = null;

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
    const line = jsonLine(row);
    // A UTF-16 unit is at most 3 UTF-8 bytes: only a line that might not fit is measured.
    if (!this.map || this.map.length - this.pos < line.length * 3) {
      const need = Buffer.byteLength(line);
      if (!this.map || this.map.length - this.pos < need) this.open(need);
    }
    this.pos += this.map!.write(line, this.pos);
  }

  /** Seals the open segment (if any) and starts a new one with room for at least `need` bytes. */
  private open(need: number): void {
    this.seal();
    const path = join(this.dir, `settle-${this.seq++}.jsonl`);
    const spare = this.spare;
    if (spare && spare.map.length >= need) {
      // Emptied when it was discarded; renamed so that replay still meets segments oldest first.
      this.spare = null;
      renameSync(spare.path, path);
      return this.use(path, spare.map);
    }
    const size = Math.max(this.segmentBytes, need);
    // O_EXCL | O_NOFOLLOW: a name planted in our folder (as a link) must not receive settlements.
    const fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
    try {
      const zeros = new Uint8Array(size);
      for (let done = 0; done < size;) {
        const n = writeSync(fd, zeros, done, size - done);
        if (n <= 0) throw new Error(`settlement journal: could not allocate ${size} bytes for ${path}`);
        done += n;
      }
    } catch (err) {
      closeSync(fd);
      unlinkIfPresent(path);
      throw err;
    }
    closeSync(fd);
    const m = Bun.mmap(path, { shared: true });
    this.use(path, Buffer.from(m.buffer, m.byteOffset, m.byteLength));
  }

  private use(path: string, map: Buffer): void {
    this.map = map;
    this.current = path;
    this.pos = 0;
  }

  private seal(): void {
    if (!this.map) return;
    this.sealed.push(this.current);
    this.mapped.set(this.current, this.map);
    this.map = null;
    this.current = '';
    this.pos = 0;
  }

  /**
   * Before a batch is written: the segments sealed since the last call (plus the open one when `force`),
   * to discard once the batch committed. Appends happen only between batches, so every line of a sealed
   * segment belongs to this batch or an earlier, committed one.
   */
  rotate(force = false): string[] {
    if (force) this.seal();
    const out = this.sealed;
    this.sealed = [];
    return out;
  }

  /**
   * Retires a sealed segment whose settlements are committed to the database. Every one is emptied at once
   * (its zeros replay as nothing); the first is kept as the spare, others are deleted off the event loop
   * (`wait`: at once): a mapping lives until the garbage collector frees it, and an unlinked file's
   * pages stay in memory and on disk as long as a mapping holds them. Should the process die first, the
   * segment replays as no-ops.
   */
  discard(path: string, wait = false): void {
    const map = this.mapped.get(path);
    this.mapped.delete(path);
    // Emptied here, before this returns: the file goes in the background, and a kill before that must find
    // nothing to replay (a batch with a failed settlement discards its segments because it answered "nothing
    // charged"). A segment without a mapping (a previous process's) has no pages of ours to touch.
    map?.fill(0);
    if (map && !wait && !this.spare) {
      this.spare = { path, map };
      return;
    }
    if (wait) return unlinkIfPresent(path);
    // Once truncated, the mapping is never touched again (it is in no field).
    truncate(path, 0, () => unlink(path, () => { /* gone already, or left to replay: both harmless */ }));
  }

  /**
   * Settlements of segments left by a previous process (crash or kill), oldest first. A torn last
   * line (the kill landed mid-write) was never acknowledged to anyone and is skipped.
   */
  leftovers(): Array<{ path: string; rows: SettlementRow[] }> {
    return this.segments().filter((s) => s.path !== this.current && s.path !== this.spare?.path).map(({ path }) => ({
      path,
      rows: linesOf(readFileSync(path, 'utf8')).flatMap((line) => {
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
    for (const path of this.rotate(true)) this.discard(path, true);
    if (this.spare) unlinkIfPresent(this.spare.path);
    this.spare = null;
  }
}

/**
 * The complete lines of a segment: each ends with a newline. The zeros after the last line (the unused
 * rest of the segment) and a torn last line (the kill landed mid-copy: no one was told it was recorded)
 * are not lines.
 */
export function linesOf(text: string): string[] {
  const parts = text.split('\n');
  parts.pop(); // after the last newline: zeros, a torn line, or nothing
  return parts.map((p) => p.replace(/^\0+/, '')).filter((p) => p.trim() !== '');
}

function unlinkIfPresent(path: string): void {
  if (existsSync(path)) unlinkSync(path);
}
