/**
 * The realtime responses a node is running, as they would be billed if it died now (table realtime_unfinished,
 * migration pg/0023): the PostgreSQL twin of repos/realtime-unfinished.ts, with the ref of each response's shared
 * hold. The node writes the rows (CheckpointStore, below); the leader's reconciler reads and deletes them
 * (UnfinishedRows) once that hold lapsed, billing each once by its request id.
 *
 * Writes never wait on the caller's path: put() and drop() queue one statement and return. They stay ordered per
 * request id (a statement is sent only once the previous one of that id is answered, and only the latest waiting
 * one is sent), so a put sent before a drop can never land after it on another pool connection and bring the row
 * back, and a response that streams faster than the database answers costs one statement in flight, not a queue.
 * At most CHECKPOINT_STATEMENTS run at once per process, whatever the number of responses: a thousand streaming
 * sessions must not take the pool connections the settlements commit on when PostgreSQL is slow.
 * A failed statement is reported to `onError` and the next one of the id goes on: a row that stays is deleted by
 * the leader's sweep once its request is settled.
 */
import { readCheckpointRow, type CheckpointStore } from '../repos/realtime-unfinished';
import type { SettlementRow } from '../repos/settlements';
import type { PgSql } from './client';

type Write = { put: SettlementRow; holdRef: string; at: number } | { put: null };

/** Checkpoint statements in flight at once per process (the rest wait, coalesced per request id). */
export const CHECKPOINT_STATEMENTS = 2;

/** What one request id has in flight: the statement being written, and the latest one waiting behind it. */
interface Lane {
  waiting: Write | null;
}

export class PgRealtimeUnfinished implements CheckpointStore {
  private readonly lanes = new Map<string, Lane>();
  private readonly running = new Set<Promise<void>>();
  // The pool's connections are the settlements' too: however many responses stream, checkpoints take at most these.
  private active = 0;
  private readonly waitingForSlot: Array<() => void> = [];

  constructor(private readonly sql: PgSql, private readonly onError: (requestId: string, op: 'put' | 'drop', err: unknown) => void) {}

  put(row: SettlementRow, holdRef = ''): void {
    this.queue(row.requestId, { put: row, holdRef, at: Date.now() });
  }

  drop(requestId: string): void {
    this.queue(requestId, { put: null });
  }

  /** Statements queued or in flight (tests, shutdown). */
  get pending(): number {
    return this.lanes.size;
  }

  /** Resolves once every statement queued so far is answered (shutdown, tests). */
  async idle(): Promise<void> {
    while (this.running.size) await Promise.all([...this.running]);
  }

  private queue(requestId: string, w: Write): void {
    const lane = this.lanes.get(requestId);
    // One in flight or waiting for a connection: this one replaces whatever waits (only the latest state matters).
    if (lane) {
      lane.waiting = w;
      return;
    }
    const fresh: Lane = { waiting: w };
    this.lanes.set(requestId, fresh);
    const run = this.drain(requestId, fresh).finally(() => this.running.delete(run));
    this.running.add(run);
  }

  private async drain(requestId: string, lane: Lane): Promise<void> {
    while (lane.waiting) {
      // Taken at once when free (the first statement goes out before put() returns); else in turn. The write is read
      // once the slot is ours, so a response streaming while it waits sends its latest state.
      if (this.active < CHECKPOINT_STATEMENTS) this.active++;
      else await new Promise<void>((r) => this.waitingForSlot.push(r));
      const w = lane.waiting!;
      lane.waiting = null;
      try {
        if (w.put) {
          await this.sql`insert into realtime_unfinished (request_id, hold_ref, row, updated_at)
            values (${requestId}, ${w.holdRef}, ${JSON.stringify(w.put)}, ${w.at})
            on conflict (request_id) do update set hold_ref = excluded.hold_ref, row = excluded.row, updated_at = excluded.updated_at`;
        } else {
          await this.sql`delete from realtime_unfinished where request_id = ${requestId}`;
        }
      } catch (err) {
        this.onError(requestId, w.put ? 'put' : 'drop', err);
      } finally {
        // A freed slot goes straight to the next waiter.
        const next = this.waitingForSlot.shift();
        if (next) next();
        else this.active--;
      }
    }
    this.lanes.delete(requestId);
  }
}

/** The leader's side: the rows of a lapsed hold, their deletion, and the sweep of rows already settled. */
export interface UnfinishedRows {
  /** The rows kept under this hold ref (null where the row is not one the gateway wrote). */
  heldBy(holdRef: string): Promise<Array<{ requestId: string; row: SettlementRow | null }>>;
  remove(requestId: string): Promise<void>;
  /** The cost the ledger already has for these request ids (their usage rows; 0 for ids never settled). */
  settledCost(requestIds: string[]): Promise<number>;
  /**
   * Deletes the rows whose request id has a usage row (settled, its node's delete lost or never sent), except those
   * sharing a hold with a row not yet settled: that hold's billing counts them against it; returns how many.
   */
  sweepSettled(): Promise<number>;
  /**
   * Runs `fn` while this process alone works on the hold `holdRef` (null, without running it, when another node does).
   * Two leaders overlap for up to one check interval during a hand-over: each billing the same lapsed hold's
   * checkpoints, each capped at the whole hold from its own count, charged up to twice the hold.
   */
  claim<T>(holdRef: string, fn: () => Promise<T>): Promise<{ value: T } | null>;
}

export function pgUnfinishedRows(sql: PgSql): UnfinishedRows {
  return {
    async heldBy(holdRef) {
      const rows = await sql<{ request_id: string; row: string }[]>`
        select request_id, row from realtime_unfinished where hold_ref = ${holdRef} order by updated_at, request_id`;
      return rows.map((r) => ({ requestId: r.request_id, row: readCheckpointRow(r.request_id, r.row) }));
    },
    async remove(requestId) {
      await sql`delete from realtime_unfinished where request_id = ${requestId}`;
    },
    async settledCost(requestIds) {
      if (!requestIds.length) return 0;
      const [r] = await sql<{ cost: string | null }[]>`
        select coalesce(sum(cost), 0) as cost from usage_logs where request_id in ${sql(requestIds)}`;
      return Number(r?.cost ?? 0);
    },
    async sweepSettled() {
      const r = await sql`delete from realtime_unfinished u using usage_logs l where l.request_id = u.request_id
        and (u.hold_ref = '' or not exists (
          select 1 from realtime_unfinished o where o.hold_ref = u.hold_ref
            and not exists (select 1 from usage_logs x where x.request_id = o.request_id)))`;
      return r.count;
    },
    async claim(holdRef, fn) {
      // A transaction-scoped advisory lock, keyed by schema and hold: given up with the transaction, or with the
      // connection if this process dies, so a hold is never left claimed. Tried, not waited for: the node that has it
      // bills and releases the hold, and a pass of this node must not stall behind it.
      return await sql.begin(async (tx) => {
        const [r] = await tx<{ ok: boolean }[]>`
          select pg_try_advisory_xact_lock(hashtextextended('gw:hold:' || current_schema() || ':' || ${holdRef}, 0)) as ok`;
        return r?.ok ? { value: await fn() } : null;
      }) as { value: Awaited<ReturnType<typeof fn>> } | null;
    },
  };
}
