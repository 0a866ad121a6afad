import postgres from 'postgres';
import { sql } from 'drizzle-orm';
import type { PgDb } from './client';
import { inChunks } from '../repos/in-chunks';
import type { AsyncSettlementSink, BalanceMirror, SettleOutcome, SettlementBudgets, SettlementRow } from '../repos/settlements';
import { budgetSpend, lockBudgets, pgBudgetCharges } from './budget-charges';
import { PgSettlementsRepo, mirrorsOf } from '../repos-pg/settlements';
import { preparedExecutor, preparedOn, type PgExecutor } from './prepared';

export interface GroupCommitOptions {
  /**
   * Longest a settlement waits for others to join its batch when no batch is being written (ms).
   * Default 0: an idle committer writes at the end of the current event-loop turn (see settle()), and what
   * arrives while a batch commits forms the next batch.
   */
  maxDelayMs?: number;
  /** A batch this large is written at once. Default 256. */
  maxBatch?: number;
  /** While the database is unreachable, a batch is retried until this long after its first try (ms). Default 15 000. */
  retryDeadlineMs?: number;
  /** First retry delay (ms), doubled per retry up to `maxBackoffMs`. Defaults 25 and 1 000. */
  backoffMs?: number;
  maxBackoffMs?: number;
  /** Sees every batch written (metrics, benches). */
  onBatch?: (info: { rows: number; ms: number; tries: number; oneByOne: boolean }) => void;
}

/** The database stayed unreachable past the retry deadline: the settlement may or may not be written. */
export class SettlementUnavailableError extends Error {
  readonly code = 'settlement_unavailable';
  constructor(requestId: string, cause: unknown) {
    super(`settlement ${requestId}: database unreachable until the retry deadline`, { cause });
    this.name = 'SettlementUnavailableError';
  }
}

interface Item {
  row: SettlementRow;
  done: (o: SettleOutcome) => void;
  fail: (e: unknown) => void;
}

/** postgres.js's own connection failures (its `code` is not an SQLSTATE). */
const CLIENT_CONNECTION_CODES = new Set(['CONNECTION_CLOSED', 'CONNECTION_ENDED', 'CONNECTION_DESTROYED', 'CONNECT_TIMEOUT']);

/**
 * Worth retrying as is: the connection broke (the commit's outcome may be unknown), the server is
 * going away or short of resources, or the transaction lost a serialization/deadlock race. Anything
 * else is about the rows and will fail again.
 */
export function isTransientPgError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return false;
  if (err instanceof postgres.PostgresError) {
    return code.startsWith('08') || code.startsWith('53') || code.startsWith('57P') || code === '40001' || code === '40P01';
  }
  // Socket errors (ECONNREFUSED, ECONNRESET, ...) surface with their errno code.
  return CLIENT_CONNECTION_CODES.has(code) || /^E[A-Z]+$/.test(code);
}

/**
 * Settlement for the PostgreSQL mode, durable before acknowledgement: `settle(row)` queues the row and
 * resolves only after the COMMIT that wrote it, so the caller can await it before its response or
 * stream ends and no local journal is needed.
 *
 * Rows are grouped (after `maxDelayMs`, or at once at `maxBatch`), and one batch at a time is written in
 * ONE transaction with the rows sorted by (user, key), so two nodes' batches take row locks in the
 * same order and cannot deadlock, and a user's balances resolve in commit order. Rows that arrive while
 * a batch commits form the next one, written as soon as it is done (they have waited already).
 *
 * Failures: a transient one (connection lost, server restarting) retries the whole batch with backoff
 * until `retryDeadlineMs`, then rejects each row with SettlementUnavailableError. Any other failure
 * rolls the batch back and writes its rows one by one, so one bad row cannot cost the others. The
 * request id is the idempotency key: retrying after a commit whose reply was lost inserts nothing, and
 * the retry recognises the row as its own (same user, cost, time, latency) and reports it as written.
 */
export class PgGroupCommitter implements AsyncSettlementSink {
  private readonly repo: PgSettlementsRepo;
  private readonly maxDelayMs: number;
  private readonly maxBatch: number;
  private readonly deadlineMs: number;
  private readonly backoffMs: number;
  private readonly maxBackoffMs: number;
  private queue: Item[] = [];
  private timer: ReturnType<typeof setTimeout> | null = null;
  private soon: ReturnType<typeof setImmediate> | null = null;
  private running: Promise<void> | null = null;
  private closed = false;
  /** A batch of one is its CTE alone, autocommitted as a prepared statement: one round trip instead of four. */
  private readonly single: PgExecutor;
  /** Budgets charged in the batch's transaction (a batch that concerns none keeps its statements). */
  private budgets: SettlementBudgets | null = null;

  constructor(private readonly db: PgDb, private readonly opts: GroupCommitOptions = {}) {
    this.repo = new PgSettlementsRepo(db);
    this.maxDelayMs = opts.maxDelayMs ?? 0;
    this.single = preparedExecutor(db);
    this.maxBatch = Math.max(1, opts.maxBatch ?? 256);
    this.deadlineMs = opts.retryDeadlineMs ?? 15_000;
    this.backoffMs = opts.backoffMs ?? 25;
    this.maxBackoffMs = opts.maxBackoffMs ?? 1_000;
  }

  async balances(): Promise<Array<{ id: number; quota: number }>> {
    const rows = await this.db.execute<{ id: number; quota: string }>(sql`SELECT id, quota FROM users`);
    return rows.map((r) => ({ id: Number(r.id), quota: Number(r.quota) }));
  }

  async balancesOf(userIds: number[]): Promise<Array<{ id: number; quota: number }>> {
    const rows = await inChunks(userIds, (chunk) =>
      this.db.execute<{ id: number; quota: string }>(sql`SELECT id, quota FROM users WHERE id IN (${sql.join(chunk.map((id) => sql`${id}`), sql`, `)})`));
    return rows.map((r) => ({ id: Number(r.id), quota: Number(r.quota) }));
  }

  async balance(userId: number): Promise<number | undefined> {
    const [r] = await this.db.execute<{ quota: string }>(sql`SELECT quota FROM users WHERE id = ${userId}`);
    return r ? Number(r.quota) : undefined;
  }

  async mirrors(userId: number, keyId: number | null): Promise<{ user: BalanceMirror | null; key: BalanceMirror | null }> {
    // One statement: both rows as of one snapshot.
    const [r] = await this.db.execute<{ quota: string | null; ver: string | null; remain: string | null; rver: string | null }>(sql`
      SELECT (SELECT quota FROM users WHERE id = ${userId}) AS quota, (SELECT balance_version FROM users WHERE id = ${userId}) AS ver,
        (SELECT remain_quota FROM api_keys WHERE id = ${keyId ?? 0}) AS remain, (SELECT remain_version FROM api_keys WHERE id = ${keyId ?? 0}) AS rver`);
    const user = r?.quota != null && r.ver != null ? { balance: Number(r.quota), version: Number(r.ver) } : null;
    const key = keyId !== null && r?.remain != null && r.rver != null ? { balance: Number(r.remain), version: Number(r.rver) } : null;
    return { user, key };
  }

  async accounts(userIds: number[]): Promise<Array<{ userId: number; user: BalanceMirror; keys: Array<{ keyId: number; mirror: BalanceMirror }> }>> {
    if (!userIds.length) return [];
    // One statement: every balance as of one snapshot.
    const rows = await this.db.execute<{ id: string; quota: string; ver: string; key_id: string | null; remain: string | null; rver: string | null }>(sql`
      SELECT u.id, u.quota, u.balance_version AS ver, k.id AS key_id, k.remain_quota AS remain, k.remain_version AS rver
      FROM users u LEFT JOIN api_keys k ON k.user_id = u.id AND NOT k.unlimited_quota
      WHERE u.id IN (SELECT unnest(${`{${userIds.map((u) => Math.trunc(u)).join(',')}}`}::bigint[]))`);
    const out = new Map<number, { userId: number; user: BalanceMirror; keys: Array<{ keyId: number; mirror: BalanceMirror }> }>();
    for (const r of rows) {
      const userId = Number(r.id);
      let a = out.get(userId);
      if (!a) out.set(userId, (a = { userId, user: { balance: Number(r.quota), version: Number(r.ver) }, keys: [] }));
      if (r.key_id !== null && r.remain !== null && r.rver !== null) a.keys.push({ keyId: Number(r.key_id), mirror: { balance: Number(r.remain), version: Number(r.rver) } });
    }
    return [...out.values()];
  }

  /** These users' balances with their versions: one statement per 10,000 ids (a burst the change feed coalesced). */
  async userMirrors(userIds: number[]): Promise<Array<{ userId: number; mirror: BalanceMirror }>> {
    const out: Array<{ userId: number; mirror: BalanceMirror }> = [];
    for (const chunk of idChunks(userIds)) {
      const rows = await this.db.execute<{ id: string; quota: string; ver: string }>(sql`
        SELECT id, quota, balance_version AS ver FROM users WHERE id = ANY(${chunk}::bigint[])`);
      for (const r of rows) out.push({ userId: Number(r.id), mirror: { balance: Number(r.quota), version: Number(r.ver) } });
    }
    return out;
  }

  /** These keys' owners and remain_quota with its version, as userMirrors. */
  async keyMirrors(keyIds: number[]): Promise<Array<{ keyId: number; userId: number; mirror: BalanceMirror }>> {
    const out: Array<{ keyId: number; userId: number; mirror: BalanceMirror }> = [];
    for (const chunk of idChunks(keyIds)) {
      const rows = await this.db.execute<{ id: string; user_id: string; remain: string; rver: string }>(sql`
        SELECT id, user_id, remain_quota AS remain, remain_version AS rver FROM api_keys WHERE id = ANY(${chunk}::bigint[])`);
      for (const r of rows) out.push({ keyId: Number(r.id), userId: Number(r.user_id), mirror: { balance: Number(r.remain), version: Number(r.rver) } });
    }
    return out;
  }

  useBudgets(budgets: SettlementBudgets): void {
    this.budgets = budgets;
  }

  async budgetSpend(ids: number[]): Promise<Array<{ id: number; periodKey: string; spent: number }>> {
    return budgetSpend(this.db, ids);
  }

  async settled(requestId: string): Promise<boolean> {
    const rows = await this.db.execute(sql`SELECT 1 FROM usage_logs WHERE request_id = ${requestId}`);
    return rows.length > 0;
  }

  /** Queues one settlement; resolves after the COMMIT that wrote it (or found it already written). */
  settle(row: SettlementRow): Promise<SettleOutcome> {
    if (this.closed) return Promise.reject(new Error('group committer closed'));
    return new Promise((done, fail) => {
      this.queue.push({ row, done, fail });
      if (this.running) return; // the running batch starts the next one when it ends
      if (this.queue.length >= this.maxBatch) this.kick();
      // Not at once: a settlement is queued while its answer is being returned, and building and sending the
      // batch (0.08-0.13 ms of this thread, measured at one client) then ran before the server wrote that
      // answer's first byte. After the turn, the answers it produced have started; the commit still comes
      // before their last byte, which waits for it.
      else if (this.maxDelayMs <= 0) this.soon ??= setImmediate(() => this.kick());
      else this.timer ??= setTimeout(() => this.kick(), this.maxDelayMs);
    });
  }

  /** Settlements queued and not yet written (the running batch not included). */
  get queued(): number {
    return this.queue.length;
  }

  /** Writes what is queued, refuses new rows, and resolves when the last batch is done. */
  async close(): Promise<void> {
    this.closed = true;
    if (!this.running) this.kick();
    while (this.running) await this.running;
  }

  private kick(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.soon) clearImmediate(this.soon);
    this.soon = null;
    if (this.running || !this.queue.length) return;
    const batch = this.queue.splice(0, this.maxBatch);
    this.running = this.commitBatch(batch).finally(() => {
      this.running = null;
      if (this.queue.length) this.kick();
    });
  }

  private async commitBatch(items: Item[]): Promise<void> {
    const t0 = performance.now();
    // Stable: a user's rows keep their arrival order, so balance_after follows it.
    items.sort((a, b) => a.row.userId - b.row.userId || a.row.apiKeyId - b.row.apiKeyId);
    const first = await this.withRetry(items.map((i) => i.row));
    if (first.ok) {
      items.forEach((it, n) => it.done(first.value[n]!));
      this.opts.onBatch?.({ rows: items.length, ms: performance.now() - t0, tries: first.tries, oneByOne: false });
      return;
    }
    if (first.unavailable) {
      for (const it of items) it.fail(new SettlementUnavailableError(it.row.requestId, first.error));
      return;
    }
    // A row-level failure rolled the batch back: each row on its own, so only the bad one fails.
    for (const it of items) {
      const one = items.length === 1 ? first : await this.withRetry([it.row]);
      if (one.ok) it.done(one.value[0]!);
      else it.fail(one.unavailable ? new SettlementUnavailableError(it.row.requestId, one.error) : one.error);
    }
    this.opts.onBatch?.({ rows: items.length, ms: performance.now() - t0, tries: first.tries, oneByOne: true });
  }

  /** One transaction for `rows`, retried while the failure is transient and the deadline not passed. */
  private async withRetry(rows: SettlementRow[]): Promise<
    { ok: true; value: SettleOutcome[]; tries: number } | { ok: false; unavailable: boolean; error: unknown; tries: number }
  > {
    const deadline = performance.now() + this.deadlineMs;
    let delay = this.backoffMs;
    // After a transient failure the previous COMMIT may have happened: a row found already written
    // is checked against what we wrote.
    let uncertain = false;
    for (let tries = 1; ; tries++) {
      try {
        // One row: its statement is atomic by itself, so no BEGIN/COMMIT round trips around it.
        // Larger: one transaction whose statements are prepared too (each one round trip, sent back to back).
        // A row that charges budgets needs its budget statements in the same transaction, even alone.
        const budgets = this.budgetsConcern(rows);
        const write = rows.length === 1 && !budgets
          ? this.writeAll(this.single, rows, uncertain)
          // A plain batch on a first try: the whole transaction in one round trip. A retry after an unknown
          // outcome recognises rows, and budget writes follow from the batch's results: both need a turn.
          : !uncertain && !budgets
            ? this.pipelined(rows)
            : (this.db.$client.begin((c) => this.writeAll(preparedOn(c), rows, uncertain)) as Promise<SettleOutcome[]>);
        const value = await beforeDeadline(write, deadline);
        return { ok: true, value, tries };
      } catch (error) {
        if (error instanceof DeadlinePassed) return { ok: false, unavailable: true, error: error.cause, tries };
        if (!isTransientPgError(error)) return { ok: false, unavailable: false, error, tries };
        uncertain = true;
        if (performance.now() + delay > deadline) return { ok: false, unavailable: true, error, tries };
        await Bun.sleep(delay);
        delay = Math.min(delay * 2, this.maxBackoffMs);
      }
    }
  }

  /**
   * A batch's transaction written in one piece: BEGIN, the row locks, the statement and COMMIT go out back
   * to back on one reserved connection and are answered together, one round trip where a transaction
   * block takes three. Safe because nothing is decided between them: a row the statement refuses (a charge
   * without its user) fails the statement itself, the transaction is aborted, and the COMMIT then ends it
   * as a ROLLBACK, which is checked. Every reply is awaited before the connection goes back to the pool.
   */
  private async pipelined(rows: SettlementRow[]): Promise<SettleOutcome[]> {
    const c = await this.db.$client.reserve();
    // postgres.js lets a reserved connection that died be released back into the pool, where the next
    // query fails on its missing socket; so its close is watched (as postgres.js's own transactions do)
    // and a closed connection is not released.
    let closed = false;
    let onClose: (err: unknown) => void = () => {};
    const broken = new Promise<never>((_, fail) => { onClose = fail; });
    broken.catch(() => {});
    const watch = (conn: { onclose?: (err: unknown) => void }) => {
      conn.onclose = (err) => { closed = true; onClose(err); };
      return true; // keeps the connection's pipeline open for the statements that follow
    };
    try {
      const begin = c.unsafe('BEGIN', [], { onexecute: watch } as never).execute();
      const work = this.repo.applyMany(rows, preparedOn(c, { eager: true }));
      const end = c.unsafe('COMMIT').execute();
      begin.catch(() => {});
      end.catch(() => {});
      // A statement's first use on a connection is described before it is sent, and postgres.js holds the
      // statements after it in the reserved connection's own queue, which a dying connection never fails:
      // its close ends the wait (the retry recognises whatever did go through). On a live connection every
      // statement is answered (after an error, the COMMIT as a ROLLBACK), so the connection goes back clean.
      const [b, w, e] = await Promise.race([Promise.allSettled([begin, work, end]), broken]);
      if (b.status === 'rejected') throw b.reason;
      if (w.status === 'rejected') throw w.reason;
      if (e.status === 'rejected') throw e.reason;
      const tag = (e.value as { command?: string }).command;
      if (tag !== 'COMMIT') throw new Error(`settlement batch: the transaction ended with ${tag ?? 'no reply'} instead of COMMIT`);
      return w.value;
    } finally {
      if (!closed) c.release();
    }
  }

  private budgetsConcern(rows: SettlementRow[]): boolean {
    const b = this.budgets;
    return !!b && rows.some((r) => r.cost > 0 && b.concerns(r.userId, r.apiKeyId));
  }

  private async writeAll(tx: PgExecutor, rows: SettlementRow[], uncertain: boolean): Promise<SettleOutcome[]> {
    const out = rows.length === 1 ? [await this.repo.apply(rows[0]!, tx)] : await this.repo.applyMany(rows, tx);
    if (uncertain) {
      for (const [n, o] of out.entries()) {
        if (!o.inserted) out[n] = await this.recognise(tx, rows[n]!);
      }
    }
    if (this.budgetsConcern(rows)) await this.chargeBudgets(tx, rows, out);
    return out;
  }

  /**
   * The budget writes of the batch, in its transaction, after its usage rows: each newly written charge
   * adds to its budgets' spend and queues the alerts it crosses, in commit order. The budgets are locked
   * first in id order (after the users and keys, as every batch does), so batches cannot deadlock. A
   * row recognised from an earlier try was charged by that try: its budgets' spend is read back instead.
   */
  private async chargeBudgets(tx: PgExecutor, rows: SettlementRow[], out: SettleOutcome[]): Promise<void> {
    const b = this.budgets!;
    const charged = rows.map((r, n) => (r.cost > 0 && out[n]!.inserted && b.concerns(r.userId, r.apiKeyId) ? n : -1)).filter((n) => n >= 0);
    await lockBudgets(tx, charged.flatMap((n) => b.budgetIds(rows[n]!.userId, rows[n]!.apiKeyId)));
    const charges = pgBudgetCharges(tx);
    for (const n of charged) {
      const o = out[n]!;
      if (!o.inserted) continue;
      const row = rows[n]!;
      if (o.recovered) {
        o.budget = { updates: await budgetSpend(tx, b.budgetIds(row.userId, row.apiKeyId)), events: [] };
        continue;
      }
      // balance_after of this row: the batch's outcome carries it per row.
      const effects = await b.commitWith(charges, row, o.balance);
      if (effects) o.budget = effects;
    }
  }

  /**
   * A row already written when we retry after an unknown commit outcome: ours if it is what we wrote
   * (then reported as written, with the user's current balance), else a genuine duplicate.
   */
  private async recognise(tx: PgExecutor, r: SettlementRow): Promise<SettleOutcome> {
    const [u] = await tx.execute<{ user_id: number; cost: string; created_at: string; latency_ms: number; quota: string | null; ver: string | null;
      remain: string | null; rver: string | null; unlimited: boolean | null }>(sql`
      SELECT l.user_id, l.cost, l.created_at, l.latency_ms, u.quota, u.balance_version AS ver, k.remain_quota AS remain,
        k.remain_version AS rver, k.unlimited_quota AS unlimited
      FROM usage_logs l LEFT JOIN users u ON u.id = l.user_id LEFT JOIN api_keys k ON k.id = l.api_key_id
      WHERE l.request_id = ${r.requestId}`);
    const ours = !!u && Number(u.user_id) === r.userId && Number(u.cost) === r.cost && Number(u.created_at) === r.createdAt
      && Number(u.latency_ms) === r.latencyMs;
    if (!ours) return { inserted: false };
    return { inserted: true, balance: r.cost > 0 && u!.quota !== null ? Number(u!.quota) : undefined, recovered: true,
      mirror: mirrorsOf(u!.quota, u!.ver, u!.remain, u!.rver, u!.unlimited) };
  }
}

class DeadlinePassed extends Error {}

/**
 * A try still waiting at the deadline (a query waits for a connection while postgres.js reconnects:
 * an attempt per second at most with reconnectBackoff, each up to its connect timeout) is no longer
 * waited for: its outcome is unknown, which is what the caller is told; if it commits later, the
 * request id keeps a retry from charging twice.
 */
function beforeDeadline<T>(p: Promise<T>, deadline: number): Promise<T> {
  const left = deadline - performance.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, fail) => {
    timer = setTimeout(() => fail(new DeadlinePassed('retry deadline passed', { cause: new Error('database did not answer before the retry deadline') })), Math.max(0, left));
  });
  p.catch(() => {}); // its late failure, if any, is nobody's business any more
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** Ids as PostgreSQL array literals ('{1,2,3}'), at most 10,000 a statement. */
function idChunks(ids: number[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < ids.length; i += 10_000) out.push(`{${ids.slice(i, i + 10_000).map((id) => Math.trunc(id)).join(',')}}`);
  return out;
}
