/**
 * The realtime responses and long streams still running, as they would be billed if the process died now (table
 * realtime_unfinished): QuotaService writes each one's settlement row when it starts and as its output grows,
 * drops it once the response is settled, and at start-up bills what a killed process left here. Never a read on
 * the request path. Writes are gathered and committed together every FLUSH_MS (one upsert on its own cost 25–30 µs
 * of the event loop, in a transaction of a hundred 1.2–1.7 µs: a thousand streams checkpointing every second were
 * a few percent of a core one by one); a kill loses at most the last FLUSH_MS of checkpoints.
 */
import type { Database } from 'bun:sqlite';
import { errorText, stdLogger } from '@gw/core';
import type { SettlementRow } from './settlements';

/** How long a checkpoint waits to be written with the others. */
const FLUSH_MS = 50;
/** After a failed write (disk full, I/O error), when the rows are tried again. */
const RETRY_MS = 1000;

/**
 * Where QuotaService keeps the checkpoint of a request still running (both backends). Synchronous and never a read:
 * SQLite writes at once on the caller's thread; PostgreSQL queues the write and returns (pg/realtime-unfinished.ts).
 */
export interface CheckpointStore {
  /**
   * Writes (or replaces) the row billed for its request id should the process die before it is settled. `holdRef`:
   * the ref of the request's shared hold (PostgreSQL mode), by which the leader finds it once that hold lapses.
   */
  put(row: SettlementRow, holdRef?: string): void;
  drop(requestId: string): void;
}

/** SQLite's checkpoints: one process owns the file, so whatever a start finds here a dead process left. */
export interface UnfinishedStore extends CheckpointStore {
  /** Every row left, oldest first (start-up, before anything is served); null where the row is not one this repo wrote. */
  left(): Array<{ requestId: string; row: SettlementRow | null }>;
  /** The readable rows left, oldest first. */
  all(): SettlementRow[];
  /** Empties the table (after its rows were billed). */
  clear(): void;
  /** Writes the checkpoints waiting to be written (shutdown). */
  flush(): void;
}

export class RealtimeUnfinishedRepo implements UnfinishedStore {
  private readonly upsert;
  private readonly remove;
  private readonly list;
  private readonly empty;
  private readonly writeAll: (rows: SettlementRow[]) => void;
  /** Checkpoints to write at the next flush, the latest per request id. */
  private readonly pending = new Map<string, SettlementRow>();
  /** Request ids with a row written by this process (only those need a delete). */
  private readonly written = new Set<string>();
  private timer: ReturnType<typeof setTimeout> | null = null;

  constructor(sqlite: Database) {
    this.upsert = sqlite.query('INSERT INTO realtime_unfinished (request_id, row, updated_at) VALUES (?1, ?2, ?3) '
      + 'ON CONFLICT(request_id) DO UPDATE SET row = ?2, updated_at = ?3');
    this.remove = sqlite.query('DELETE FROM realtime_unfinished WHERE request_id = ?');
    this.list = sqlite.query<{ request_id: string; row: string }, []>('SELECT request_id, row FROM realtime_unfinished ORDER BY updated_at, request_id');
    this.empty = sqlite.query('DELETE FROM realtime_unfinished');
    this.writeAll = sqlite.transaction((rows: SettlementRow[]) => {
      const now = Date.now();
      for (const row of rows) this.upsert.run(row.requestId, JSON.stringify(row), now);
    });
  }

  put(row: SettlementRow): void {
    this.pending.set(row.requestId, row);
    if (!this.timer) {
      this.timer = setTimeout(() => this.flushLogged(), FLUSH_MS);
      this.timer.unref?.();
    }
  }

  /** Synchronous (a failure throws to the settlement, which logs it); a row never written needs no statement. */
  drop(requestId: string): void {
    this.pending.delete(requestId);
    if (!this.written.delete(requestId)) return;
    this.remove.run(requestId);
  }

  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (!this.pending.size) return;
    const rows = [...this.pending.values()];
    this.pending.clear();
    try {
      this.writeAll(rows);
    } catch (err) {
      // Kept for the next try: a request that checkpoints no more (a silent stream) would otherwise lose its row.
      // Nothing ran between the clear and here, so no newer row or drop came meanwhile.
      for (const row of rows) this.pending.set(row.requestId, row);
      throw err;
    }
    for (const row of rows) this.written.add(row.requestId);
  }

  private flushLogged(): void {
    try {
      this.flush();
    } catch (err) {
      stdLogger.error('settlement.unfinished_write_failed', { cause: errorText(err), msg: 'checkpoints not written yet; tried again in a second' });
      this.timer ??= setTimeout(() => this.flushLogged(), RETRY_MS);
      this.timer.unref?.();
    }
  }

  left(): Array<{ requestId: string; row: SettlementRow | null }> {
    this.flush();
    return this.list.all().map(({ request_id, row }) => ({ requestId: request_id, row: readCheckpointRow(request_id, row) }));
  }

  all(): SettlementRow[] {
    return this.left().flatMap(({ row }) => (row ? [row] : []));
  }

  clear(): void {
    this.pending.clear();
    this.written.clear();
    this.empty.run();
  }
}

/**
 * A stored row as the settlement it was written from, or null for anything else (the file edited, damaged or
 * restored from elsewhere): start-up bills these rows before serving, and one it cannot read must be skipped,
 * not stop every start (JSON `null` did), nor charge a negative cost (a credit) or under another request id.
 */
export function readCheckpointRow(requestId: string, text: string): SettlementRow | null {
  let row: any;
  try {
    row = JSON.parse(text);
  } catch {
    return null;
  }
  if (!row || typeof row !== 'object' || Array.isArray(row) || row.requestId !== requestId) return null;
  const ints = [row.userId, row.apiKeyId, row.cost];
  return ints.every((n) => Number.isSafeInteger(n)) && row.cost >= 0 ? row as SettlementRow : null;
}
