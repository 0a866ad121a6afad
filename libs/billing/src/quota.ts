import { costOf, GatewayError, nowSeconds, type ChangeBus } from '@gw/core';
import type { Database } from 'bun:sqlite';
import type { PriceRow, SettlementsRepo, UsersRepo } from '@gw/db';
import type { PriceBook } from './price-book';

/** The parts of a relay API key the quota needs (structurally an @gw/identity ApiKeyRecord). */
export interface QuotaKey {
  id: number;
  unlimitedQuota: boolean;
  remainQuota: number;
}

/** Money held for one in-flight request; released exactly once (by settle or release). */
export interface Reservation {
  readonly ref: string;
  readonly userId: number;
  readonly keyId: number;
  readonly keyLimited: boolean;
  readonly amount: number;
  done: boolean;
}

/** Token counts by kind, as the upstream reported them. */
export interface TokenUsage {
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
  audioInput?: number;
  audioOutput?: number;
}

/** Everything a usage log row records; `cost` is computed by settle from `usage` and the price. */
export interface UsageLogInput {
  requestId: string;
  kind?: 'messages' | 'realtime';
  userId: number;
  apiKeyId: number;
  channelId: number | null;
  model: string;
  upstreamModel: string;
  stream: boolean;
  usage: TokenUsage;
  /** Defaults to the PriceBook's current price of `model` (zero when unpriced). */
  price?: PriceRow;
  latencyMs: number;
  ttftMs: number | null;
  status: number;
  errorCode: string;
  attempts: number;
  ip: string;
}

/** Exact cost in quota units of `u` at `p` (rounded up once over all kinds). */
export function costFor(u: TokenUsage, p: Pick<PriceRow, 'input' | 'output' | 'cacheRead' | 'cacheWrite' | 'audioInput' | 'audioOutput'> | undefined): number {
  if (!p) return 0;
  return costOf([
    [u.input, p.input], [u.output, p.output], [u.cacheRead, p.cacheRead], [u.cacheWrite, p.cacheWrite],
    [u.audioInput ?? 0, p.audioInput], [u.audioOutput ?? 0, p.audioOutput],
  ]);
}

/** The outcome of settling one request. */
export interface Settlement {
  /** Quota units charged (0 when already settled). */
  cost: number;
  /** This request id had been settled before: nothing was written. */
  duplicate: boolean;
}

interface Entry {
  r: Reservation | null;
  log: UsageLogInput;
  cost: number;
  inserted: boolean;
  balance: number | null;
  error: unknown;
}

/**
 * Balances and reservations in memory; the writes of a request happen once, at settle time.
 *
 * reserve() holds the request's worst case against the user's balance (users.quota minus what other
 * in-flight requests hold) and, for limited keys, the key's remain_quota. Settling a request writes its
 * usage log row (unique request id), its ledger charge (unique (charge, request id)) and the user's and
 * key's counters inside ONE transaction, so a crash leaves either all of it or none of it, and settling the same request again is a no-op. Events are emitted after commit and the
 * reservation released last, so between commit and release the money is counted twice (conservative),
 * never zero times.
 *
 * `settleAsync` group-commits: settlements arriving in the same event-loop turn share one transaction
 * (if it fails, each is retried in its own, so one bad entry cannot undo the others), which keeps the
 * per-request cost of metering small under load. `settle` writes immediately.
 */
export class QuotaService {
  private readonly balances = new Map<number, number>();
  private readonly userHeld = new Map<number, number>();
  private readonly keyHeld = new Map<number, number>();
  private queue: Array<{ e: Entry; done: (s: Settlement) => void; fail: (err: unknown) => void }> = [];
  private flushScheduled = false;

  constructor(private readonly deps: {
    sqlite: Database; users: UsersRepo; settlements: SettlementsRepo; prices: PriceBook; bus: ChangeBus;
  }) {
    deps.bus.on('user.changed', ({ userId }) => {
      // Only users already cached are refreshed; the others load on their first request.
      if (this.balances.has(userId)) this.loadBalance(userId);
    });
    deps.bus.on('balance.changed', ({ userId, balance }) => {
      if (this.balances.has(userId)) this.balances.set(userId, balance);
    });
  }

  private loadBalance(userId: number): number {
    const u = this.deps.users.byId(userId);
    if (!u) {
      this.balances.delete(userId);
      return 0;
    }
    this.balances.set(userId, u.quota);
    return u.quota;
  }

  /** The user's committed balance (memory; read once per user per process). */
  balance(userId: number): number {
    return this.balances.get(userId) ?? this.loadBalance(userId);
  }

  /** What the user can still reserve now. */
  available(userId: number): number {
    return this.balance(userId) - (this.userHeld.get(userId) ?? 0);
  }

  /** Holds `amount` for a request; throws 402 billing_error `quota_exhausted` when short. */
  reserve(input: { userId: number; apiKey: QuotaKey; amount: number; ref: string }): Reservation {
    const amount = Math.max(0, Math.ceil(input.amount));
    const avail = this.available(input.userId);
    if (amount > avail || avail <= 0) {
      throw new GatewayError(402, 'quota_exhausted', `Insufficient balance: this request may cost up to ${amount} quota units, ${Math.max(0, avail)} available`);
    }
    const k = input.apiKey;
    if (!k.unlimitedQuota) {
      const keyAvail = k.remainQuota - (this.keyHeld.get(k.id) ?? 0);
      if (amount > keyAvail || keyAvail <= 0) {
        throw new GatewayError(402, 'key_quota_exhausted', `API key quota exhausted: this request may cost up to ${amount} quota units, ${Math.max(0, keyAvail)} left on the key`);
      }
      this.keyHeld.set(k.id, (this.keyHeld.get(k.id) ?? 0) + amount);
    }
    this.userHeld.set(input.userId, (this.userHeld.get(input.userId) ?? 0) + amount);
    return { ref: input.ref, userId: input.userId, keyId: k.id, keyLimited: !k.unlimitedQuota, amount, done: false };
  }

  /** Returns the held amount; idempotent. */
  release(r: Reservation): void {
    if (r.done) return;
    r.done = true;
    dec(this.userHeld, r.userId, r.amount);
    if (r.keyLimited) dec(this.keyHeld, r.keyId, r.amount);
  }

  private entry(r: Reservation | null, log: UsageLogInput): Entry {
    return { r, log, cost: costFor(log.usage, log.price ?? this.deps.prices.get(log.model)), inserted: false, balance: null, error: undefined };
  }

  /** Bills a finished request now, exactly once, and releases its reservation. Throws if the write failed (nothing charged). */
  settle(r: Reservation | null, log: UsageLogInput): Settlement {
    const e = this.entry(r, log);
    this.write([e]);
    if (e.error) throw e.error;
    return { cost: e.inserted ? e.cost : 0, duplicate: !e.inserted };
  }

  /** Like settle, group-committed with the other settlements of this event-loop turn. */
  settleAsync(r: Reservation | null, log: UsageLogInput): Promise<Settlement> {
    return new Promise((done, fail) => {
      this.queue.push({ e: this.entry(r, log), done, fail });
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  /** Writes every queued settlement now (also called on shutdown). */
  flush(): void {
    this.flushScheduled = false;
    const batch = this.queue;
    this.queue = [];
    if (!batch.length) return;
    this.write(batch.map((b) => b.e));
    for (const b of batch) {
      if (b.e.error) b.fail(b.e.error);
      else b.done({ cost: b.e.inserted ? b.e.cost : 0, duplicate: !b.e.inserted });
    }
  }

  private write(entries: Entry[]): void {
    const { sqlite, bus } = this.deps;
    const at = nowSeconds();
    try {
      // Fast path: the whole batch in one transaction.
      sqlite.transaction(() => { for (const e of entries) this.writeOne(e, at); })();
    } catch (batchErr) {
      // Something in the batch failed and the transaction rolled back: settle each entry on its own,
      // so one bad entry cannot cost the others their settlement.
      for (const e of entries) {
        e.inserted = false;
        e.balance = null;
        try {
          sqlite.transaction(() => this.writeOne(e, at))();
        } catch (err) {
          e.error = err;
          e.inserted = false;
          e.balance = null;
        }
      }
      if (entries.length === 1) entries[0]!.error ??= batchErr;
    }
    const balances = new Map<number, number>();
    const keysChanged = new Set<number>();
    for (const e of entries) {
      if (!e.inserted || e.cost <= 0) continue;
      // Entries are in commit order, so the last balance of a user is the current one.
      if (e.balance !== null) balances.set(e.log.userId, e.balance);
      // Only a limited key's remain_quota matters to the request path; an unlimited key's cached
      // used_quota is informational and is not refreshed per request (the API reads it from the table).
      if (!e.r || e.r.keyLimited) keysChanged.add(e.log.apiKeyId);
    }
    try {
      for (const [userId, balance] of balances) bus.emit('balance.changed', { userId, balance });
      for (const keyId of keysChanged) bus.emit('apikey.changed', { keyId });
    } finally {
      for (const e of entries) if (e.r) this.release(e.r);
    }
  }

  private writeOne(e: Entry, at: number): void {
    const { log, cost } = e;
    const r = this.deps.settlements.apply({
      requestId: log.requestId, kind: log.kind ?? 'messages', userId: log.userId, apiKeyId: log.apiKeyId,
      channelId: log.channelId, model: log.model, upstreamModel: log.upstreamModel, stream: log.stream,
      inputTokens: log.usage.input, outputTokens: log.usage.output, cacheReadTokens: log.usage.cacheRead,
      cacheWriteTokens: log.usage.cacheWrite, audioInputTokens: log.usage.audioInput ?? 0,
      audioOutputTokens: log.usage.audioOutput ?? 0, cost, latencyMs: log.latencyMs, ttftMs: log.ttftMs,
      status: log.status, errorCode: log.errorCode, attempts: log.attempts, ip: log.ip, createdAt: at,
    });
    e.inserted = r.inserted;
    if (r.inserted && r.balance !== undefined) e.balance = r.balance;
  }
}

function dec(m: Map<number, number>, id: number, by: number): void {
  const v = (m.get(id) ?? 0) - by;
  if (v <= 0) m.delete(id);
  else m.set(id, v);
}
