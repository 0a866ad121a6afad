import { costOf, GatewayError, nowSeconds, type ChangeBus } from '@gw/core';
import { apiKeys, users, type Db, type LedgerRepo, type PriceRow, type UsageLogsRepo, type UsersRepo } from '@gw/db';
import { eq, sql } from 'drizzle-orm';
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

/**
 * Balances and reservations in memory; one transaction per request at settle time.
 *
 * reserve() holds the request's worst case against the user's balance (users.quota minus what other
 * in-flight requests hold) and, for limited keys, the key's remain_quota. settle() writes the usage log
 * row (unique request id), the ledger charge (unique (charge, request id)), the user's and key's
 * counters in ONE transaction, so a crash leaves either all of it or none of it, and a repeated settle
 * of the same request is a no-op. Events are emitted after commit; the reservation is released last,
 * so between commit and release the money is counted twice (conservative), never zero times.
 */
export class QuotaService {
  private readonly balances = new Map<number, number>();
  private readonly userHeld = new Map<number, number>();
  private readonly keyHeld = new Map<number, number>();

  constructor(private readonly deps: {
    db: Db; users: UsersRepo; ledger: LedgerRepo; usageLogs: UsageLogsRepo; prices: PriceBook; bus: ChangeBus;
  }) {
    deps.bus.on('user.changed', ({ userId }) => {
      // Only users already cached are refreshed; the others load on their first request.
      if (this.balances.has(userId)) this.loadBalance(userId);
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

  /**
   * Bills a finished request exactly once and releases its reservation. Returns the cost charged
   * (0 when this request id was already settled, `duplicate` true then).
   */
  settle(r: Reservation | null, log: UsageLogInput): { cost: number; duplicate: boolean } {
    const price = log.price ?? this.deps.prices.get(log.model);
    const cost = costFor(log.usage, price);
    const at = nowSeconds();
    const { db, ledger, usageLogs, bus } = this.deps;
    let inserted = false;
    try {
      inserted = db.transaction((tx) => {
        const fresh = usageLogs.insertOnce({
          requestId: log.requestId, kind: log.kind ?? 'messages', userId: log.userId, apiKeyId: log.apiKeyId,
          channelId: log.channelId, model: log.model, upstreamModel: log.upstreamModel, stream: log.stream,
          inputTokens: log.usage.input, outputTokens: log.usage.output, cacheReadTokens: log.usage.cacheRead,
          cacheWriteTokens: log.usage.cacheWrite, audioInputTokens: log.usage.audioInput ?? 0,
          audioOutputTokens: log.usage.audioOutput ?? 0, cost, latencyMs: log.latencyMs, ttftMs: log.ttftMs,
          status: log.status, errorCode: log.errorCode, attempts: log.attempts, ip: log.ip, createdAt: at,
        }, tx);
        if (!fresh) return false;
        if (cost > 0) ledger.apply({ userId: log.userId, kind: 'charge', amount: -cost, ref: log.requestId, note: log.model, at }, tx);
        const ok = log.status < 400 ? 1 : 0;
        if (cost > 0 || ok) {
          tx.update(users).set({ usedQuota: sql`${users.usedQuota} + ${cost}`, requestCount: sql`${users.requestCount} + ${ok}` })
            .where(eq(users.id, log.userId)).run();
        }
        if (cost > 0) {
          const limited = r?.keyLimited ?? true;
          tx.update(apiKeys).set({
            usedQuota: sql`${apiKeys.usedQuota} + ${cost}`,
            ...(limited ? { remainQuota: sql`${apiKeys.remainQuota} - ${cost}` } : {}),
          }).where(eq(apiKeys.id, log.apiKeyId)).run();
        }
        return true;
      });
      if (inserted && cost > 0) {
        bus.emit('user.changed', { userId: log.userId });
        bus.emit('apikey.changed', { keyId: log.apiKeyId });
      }
    } finally {
      if (r) this.release(r);
    }
    return { cost: inserted ? cost : 0, duplicate: !inserted };
  }
}

function dec(m: Map<number, number>, id: number, by: number): void {
  const v = (m.get(id) ?? 0) - by;
  if (v <= 0) m.delete(id);
  else m.set(id, v);
}
