import type { AsyncBudgetCharges } from './budgets';
import type { Database, SQLQueryBindings, Statement } from 'bun:sqlite';
import { MAX_COUNTER } from '@gw/core';

/** One metered request as it is written: the usage row plus what it does to balances. */
export interface SettlementRow {
  requestId: string;
  kind: string;
  userId: number;
  apiKeyId: number;
  channelId: number | null;
  model: string;
  upstreamModel: string;
  stream: boolean;
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  /** The 1-hour part of cacheWriteTokens; absent in older journal rows (0). */
  cacheWrite1hTokens?: number;
  /** Billed at the long-context prices; absent in older journal rows (false). */
  longContext?: boolean;
  audioInputTokens: number;
  audioOutputTokens: number;
  /** Web searches billed; absent in older journal rows (0). */
  webSearchRequests?: number;
  /** Code-execution calls billed; absent in older journal rows (0). */
  codeExecutionRequests?: number;
  cost: number;
  latencyMs: number;
  ttftMs: number | null;
  status: number;
  errorCode: string;
  /** '' or a comma list of why the billed usage differs from the report; absent in older journal rows. */
  usageFlag?: string;
  attempts: number;
  ip: string;
  createdAt: number;
  /** The requesting group and the per-mille price ratio applied; absent in older journal rows ('' and 1000). */
  group?: string;
  priceRatio?: number;
  /** The model whose price was applied; absent in older journal rows (''). */
  billedModel?: string;
  /** JSON list of the channel overrides that changed the request; absent in older journal rows (''). */
  overrides?: string;
}

/**
 * The settlement port of the single-process (SQLite) QuotaService, synchronous on purpose: metering
 * runs for every request, and a batch of settlements is written in one transaction right after the
 * journal append. Through an async interface each batch would pay a microtask per statement and the
 * batch could no longer be one synchronous transaction. The PostgreSQL mode does not use this port:
 * it settles through group commits (PgGroupCommitter).
 */
export interface SettlementSink {
  /** Every user's committed balance (start-up: QuotaService keeps balances in memory). */
  balances(): Array<{ id: number; quota: number }>;
  /** One user's committed balance; undefined = no such user. */
  balance(userId: number): number | undefined;
  /** Runs `fn` in one transaction: every `apply` inside it commits, or none (it throws). */
  transaction(fn: () => void): void;
  /** Writes one settlement inside the open transaction (see SettlementsRepo.apply). */
  apply(r: SettlementRow): { inserted: false } | { inserted: true; balance: number | undefined };
}

/** A balance as of its row version (users.balance_version, api_keys.remain_version). */
export interface BalanceMirror {
  balance: number;
  version: number;
}

/** What writing one settlement did: nothing (request id already settled), or the charge and the balance after it. */
export type SettleOutcome =
  | { inserted: false }
  /**
   * `recovered`: written by an earlier try whose COMMIT reply was lost, recognised on retry.
   * `mirror` (PostgreSQL): the user's balance and, for a limited key, its remain_quota as committed
   * (with their versions), for the shared admission store; absent where nothing was read back.
   */
  | { inserted: true; balance: number | undefined; recovered?: boolean; mirror?: { user?: BalanceMirror; key?: BalanceMirror }; budget?: SettlementBudgetEffects };

/** What a settlement's transaction did to budgets: each charged budget's spend as committed, and the alerts it queued. */
export interface SettlementBudgetEffects {
  updates: Array<{ id: number; periodKey: string; spent: number }>;
  events: Array<{ id: string; type: 'budget.threshold' | 'balance.low'; created_at: number; data: Record<string, unknown> }>;
}

/**
 * The budget writes a shared database's settlement makes in the same transaction as the charge
 * (the budget book, bound to the database's transaction by the sink).
 */
export interface SettlementBudgets {
  /** Whether a charge of this user and key touches budgets or alerts (no other statement runs otherwise). */
  concerns(userId: number, keyId: number): boolean;
  /** The budgets a charge of this user and key counts against (locked first, in id order). */
  budgetIds(userId: number, keyId: number): number[];
  /** Charges the budgets and queues the alerts of one newly written row (cost > 0). */
  commitWith(charges: AsyncBudgetCharges, row: SettlementRow, balanceAfter: number | undefined): Promise<SettlementBudgetEffects | null>;
}

/**
 * The settlement port of the PostgreSQL mode: each settlement resolves only once it is committed
 * (group commit, see PgGroupCommitter), so the caller awaits it before acknowledging the request
 * and no local journal is needed. Rejects when the write failed for good (nothing charged, or with
 * SettlementUnavailableError an unknown outcome that a retry under the same request id resolves).
 */
export interface AsyncSettlementSink {
  /** Every user's committed balance (start-up). */
  balances(): Promise<Array<{ id: number; quota: number }>>;
  /** One user's committed balance; undefined = no such user. */
  balance(userId: number): Promise<number | undefined>;
  /** The committed balances of those users that exist (a burst of changes heard at once); absent: one balance() each. */
  balancesOf?(userIds: number[]): Promise<Array<{ id: number; quota: number }>>;
  settle(row: SettlementRow): Promise<SettleOutcome>;
  /** The committed balance of a user and, with `keyId`, of that key, with their versions; null = no such row. */
  mirrors?(userId: number, keyId: number | null): Promise<{ user: BalanceMirror | null; key: BalanceMirror | null }>;
  /** Whether a settlement with this request id is committed (the reconciler's question about a dead node's hold). */
  settled?(requestId: string): Promise<boolean>;
  /** Charge budgets in each settlement's transaction from now on. */
  useBudgets?(budgets: SettlementBudgets): void;
  /** Budgets' committed spend (the shared admission's mirrors); a budget that is gone is left out. */
  budgetSpend?(ids: number[]): Promise<Array<{ id: number; periodKey: string; spent: number }>>;
}

/**
 * The per-request write of metering, on raw prepared statements: it runs for every request, and
 * through the query builder it cost several times what SQLite itself spends. It writes exactly
 * what QuotaService and LedgerRepo define (usage row unique by request id, ledger 'charge' with
 * ref = request id and balance_after, user and key counters); the caller owns the transaction.
 */
export class SettlementsRepo implements SettlementSink {
  private readonly insertUsage: Statement;
  private readonly userQuota: Statement;
  private readonly chargeUser: Statement;
  private readonly insertLedger: Statement;
  private readonly chargeKey: Statement;
  private readonly allBalances: Statement;
  /**
   * The statements' parameters, filled in place for each row and bound as one array: a spread call builds an
   * arguments array per call (31 values: about 270 bytes of garbage per settlement).
   */
  private readonly usageParams: unknown[] = new Array(31);
  private readonly ledgerParams: unknown[] = new Array(6);
  /**
   * The batch's transaction, made once: bun:sqlite's db.transaction() builds four wrappers and their properties
   * each time (about 1.7 KB), once per batch, which at one connection is about once per request.
   */
  private readonly inTransaction: (fn: () => void) => void;
  /**
   * The user and key counters of the open transaction's settlements, written once per user and key when it
   * ends: a batch of one user's settlements cost two UPDATEs per row before (about a third of the batch).
   * The balance after each charge is the balance read at the user's first charge minus the charges since:
   * exact, because nothing else writes this database while the (synchronous) transaction runs.
   */
  private batch: BatchCounters | null = null;

  constructor(private readonly sqlite: Database) {
    // Nested inside an open one, the same function opens a savepoint (see nested).
    this.inTransaction = sqlite.transaction((fn: () => void) => fn());
    this.allBalances = sqlite.prepare('SELECT id, quota FROM users');
    this.userQuota = sqlite.prepare('SELECT quota FROM users WHERE id = ?');
    this.insertUsage = sqlite.prepare(`INSERT INTO usage_logs (request_id, kind, user_id, api_key_id, channel_id, model, upstream_model,
      stream, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, audio_input_tokens, audio_output_tokens, cost,
      latency_ms, ttft_ms, status, error_code, usage_flag, attempts, ip, created_at, cache_write_1h_tokens, long_context, "group", price_ratio,
      billed_model, overrides, web_search_requests, code_execution_requests)
      VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (request_id) DO NOTHING`);
    // updated_at: the last charge's time; a batch of only free requests leaves it as it was (NULL ?3).
    this.chargeUser = sqlite.prepare(`UPDATE users SET quota = quota - ?1, used_quota = min(used_quota + ?1, ${MAX_COUNTER}),
      request_count = min(request_count + ?2, ${MAX_COUNTER}), updated_at = coalesce(?3, updated_at) WHERE id = ?4`);
    this.insertLedger = sqlite.prepare(`INSERT INTO ledger (user_id, kind, amount, balance_after, ref, note, created_at)
      VALUES (?, 'charge', ?, ?, ?, ?, ?)`);
    // Also the key's last use: written here, in the batch, rather than by a write per request.
    this.chargeKey = sqlite.prepare(`UPDATE api_keys SET used_quota = min(used_quota + ?1, ${MAX_COUNTER}),
      remain_quota = CASE WHEN unlimited_quota THEN remain_quota ELSE remain_quota - ?1 END,
      last_used_at = max(coalesce(last_used_at, 0), ?3) WHERE id = ?2`);
  }

  balances(): Array<{ id: number; quota: number }> {
    return this.allBalances.all() as Array<{ id: number; quota: number }>;
  }

  balance(userId: number): number | undefined {
    return (this.userQuota.get(userId) as { quota: number } | null)?.quota;
  }

  transaction(fn: () => void): void {
    if (this.batch) return this.nested(this.batch, fn);
    const batch: BatchCounters = (this.batch = { users: new Map(), keys: new Map() });
    try {
      this.inTransaction(() => {
        fn();
        this.writeCounters(batch);
      });
    } finally {
      this.batch = null;
    }
  }

  /**
   * Writes one settlement inside the open transaction (opened by `transaction`; outside one it opens its
   * own). Returns `inserted: false` when the request id was already settled (nothing written), else the
   * user's balance after the charge (`undefined` when nothing was charged).
   */
  apply(r: SettlementRow): { inserted: false } | { inserted: true; balance: number | undefined } {
    if (!this.batch) {
      let out!: ReturnType<SettlementsRepo['apply']>;
      this.transaction(() => { out = this.apply(r); });
      return out;
    }
    const p = this.usageParams;
    p[0] = r.requestId; p[1] = r.kind; p[2] = r.userId; p[3] = r.apiKeyId; p[4] = r.channelId; p[5] = r.model; p[6] = r.upstreamModel;
    p[7] = r.stream ? 1 : 0; p[8] = r.inputTokens; p[9] = r.outputTokens; p[10] = r.cacheReadTokens; p[11] = r.cacheWriteTokens;
    p[12] = r.audioInputTokens; p[13] = r.audioOutputTokens; p[14] = r.cost; p[15] = r.latencyMs; p[16] = r.ttftMs; p[17] = r.status;
    p[18] = r.errorCode; p[19] = r.usageFlag ?? ''; p[20] = r.attempts; p[21] = r.ip; p[22] = r.createdAt; p[23] = r.cacheWrite1hTokens ?? 0;
    p[24] = r.longContext ? 1 : 0; p[25] = r.group ?? ''; p[26] = r.priceRatio ?? 1000; p[27] = r.billedModel ?? ''; p[28] = r.overrides ?? '';
    p[29] = r.webSearchRequests ?? 0; p[30] = r.codeExecutionRequests ?? 0;
    const res = this.insertUsage.run(p as SQLQueryBindings[]);
    if (res.changes === 0) return NOT_INSERTED;
    const { users, keys } = this.batch;
    let u = users.get(r.userId);
    if (!u) users.set(r.userId, (u = { balance: undefined, cost: 0, count: 0, updatedAt: null }));
    if (r.status < 400) u.count++;
    let k = keys.get(r.apiKeyId);
    if (!k) keys.set(r.apiKeyId, (k = { cost: 0, lastUsed: 0 }));
    k.lastUsed = Math.max(k.lastUsed, r.createdAt);
    if (r.cost <= 0) return NOTHING_CHARGED;
    if (u.balance === undefined) {
      const row = this.userQuota.get(r.userId) as { quota: number } | null;
      if (!row) throw new Error(`ledger: no user ${r.userId}`);
      u.balance = row.quota;
    }
    // (kind, ref) is unique in the ledger: a second charge for the same request fails the transaction,
    // before the running counters count it.
    const balance = u.balance - r.cost;
    const l = this.ledgerParams;
    l[0] = r.userId; l[1] = -r.cost; l[2] = balance; l[3] = r.requestId; l[4] = r.model; l[5] = r.createdAt;
    this.insertLedger.run(l as SQLQueryBindings[]);
    u.balance = balance;
    u.cost += r.cost;
    u.updatedAt = r.createdAt;
    k.cost += r.cost;
    return { inserted: true, balance };
  }

  /**
   * A transaction inside the open one: a savepoint (bun:sqlite nests that way), and should it fail, the
   * batch's running counters go back to what they were before it, as its rows do.
   */
  private nested(batch: BatchCounters, fn: () => void): void {
    const users = new Map([...batch.users].map(([id, u]) => [id, { ...u }]));
    const keys = new Map([...batch.keys].map(([id, k]) => [id, { ...k }]));
    try {
      this.inTransaction(fn);
    } catch (err) {
      batch.users = users;
      batch.keys = keys;
      throw err;
    }
  }

  private writeCounters(batch: BatchCounters): void {
    for (const [id, u] of batch.users) if (u.cost > 0 || u.count > 0) this.chargeUser.run(u.cost, u.count, u.updatedAt, id);
    for (const [id, k] of batch.keys) this.chargeKey.run(k.cost, id, k.lastUsed);
  }
}

/** apply()'s answers that carry nothing of the row: shared, not made per settlement (callers only read them). */
const NOT_INSERTED: { inserted: false } = Object.freeze({ inserted: false });
const NOTHING_CHARGED: { inserted: true; balance: undefined } = Object.freeze({ inserted: true, balance: undefined });

/** The open transaction's counters, by user id and by key id. */
interface BatchCounters {
  users: Map<number, UserDelta>;
  keys: Map<number, KeyDelta>;
}

/** One user's charges in the open transaction; `balance` is read at its first charge. */
interface UserDelta {
  balance: number | undefined;
  cost: number;
  count: number;
  updatedAt: number | null;
}

/** One key's charges in the open transaction. */
interface KeyDelta {
  cost: number;
  lastUsed: number;
}
