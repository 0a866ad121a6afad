import { BatchedRefresh, GatewayError, RATIO_ONE, errorText, inexactBalanceError, nowSeconds, retryFor, safeCount, type ChangeBus, type ChangeEvents, type Logger } from '@gw/core';
import type { AsyncSettlementSink, CheckpointStore, SettlementRow, SettlementSink, UnfinishedStore } from '@gw/db';
import type { SettlementJournal } from './journal';
import type { PriceBook } from './price-book';
import { guardUsage, withFlag, type UsageLimits } from './usage-guard';
import { priceUsage } from './tiers';
import { type QuotaKey, type Reservation, type Settlement, type UsageLogInput } from './usage';
import type { AlertEvent, BudgetBook, BudgetEffects } from './budgets/book';
import { budgetAvailable, shortfall, type AfterCommit, type BudgetScope, type Hold, type HoldStore, type Mirror, type ReserveResult } from './holds/port';
import type { LiveHolds } from './holds/live-holds';

export * from './usage';

interface Entry {
  r: Reservation | null;
  row: SettlementRow;
  limitedKey: boolean;
  /** A charge without a reservation on a limited key (UsageLogInput.keyLimited): the shared store caps it by the key too. */
  capKey?: boolean;
  inserted: boolean;
  balance: number | null;
  error: unknown;
  /** Budgets this recorded cost counts against until it commits. */
  budgetIds: number[] | null;
  /** What the commit did to budgets (installed after the transaction). */
  budget: BudgetEffects | null;
  waiters: Array<{ done: (s: Settlement) => void; fail: (err: unknown) => void }>;
}

export interface QuotaDeps {
  /**
   * Balances and the settlement write, synchronous: reserve() reads a balance on the request path,
   * and a batch is one transaction written right after the journal append (see SettlementSink).
   */
  sink?: SettlementSink;
  /**
   * Instead of `sink` (PostgreSQL mode): each settlement is awaited until committed (group commit), so
   * no journal; budgets are charged in its transaction (the sink's useBudgets). Build with QuotaService.openDurable.
   */
  durable?: AsyncSettlementSink;
  prices: PriceBook;
  bus: ChangeBus;
  /** Absent: settlements are not journaled (in-memory database: nothing would survive a crash anyway). */
  journal?: SettlementJournal | null;
  /**
   * With `sink`: where checkpoint() keeps the settlement of a request still running (a realtime response, a long stream), billed
   * at the next start if this process dies first. Absent: checkpoint() does nothing (with `sink`).
   */
  unfinished?: UnfinishedStore | null;
  /**
   * With `durable`: where checkpoint() keeps it, under the ref of the request's shared hold; the leader's reconciler
   * bills it once that hold lapses (the node died). Never read here: no start-up billing in this mode (the rows of
   * every other node, alive, are in the same table). Absent: checkpoint() does nothing (with `durable`).
   */
  checkpoints?: CheckpointStore | null;
  /** Longest a recorded settlement waits before its batch is written (ms). */
  flushMs?: number;
  /** A batch this large is written at once. */
  flushBatch?: number;
  log?: Logger;
  /** Sees every settlement as it is recorded or written (metrics). */
  observe?: (row: SettlementRow) => void;
  /** Periodic budgets and low-balance alerts; absent = none. */
  budgets?: BudgetBook;
  /** Alerts committed with a batch of charges (already in the outbox): wakes the delivery worker. */
  onAlerts?: (events: AlertEvent[]) => void;
  /**
   * Durable mode: admission through a store every node shares (Redis), so N nodes admit like one.
   * Absent: each process admits against its own balances (SQLite mode; one node).
   */
  holds?: SharedHolds;
}

/** The shared admission store, this node's live holds (renewed every lease/3) and the lease. */
export interface SharedHolds {
  store: HoldStore;
  live: LiveHolds;
  leaseMs: number;
}

/**
 * Balances and reservations in memory; the writes of a request happen once, at settle time.
 *
 * reserve() holds a request's worst case against what the user can spend: the committed balance
 * (users.quota) minus settlements recorded but not yet written, minus what other in-flight requests
 * hold — and, for limited keys, the same against the key's remain_quota. So concurrent requests can
 * never overspend, whatever the write lag.
 *
 * record() makes a settlement durable by appending it to the journal (synchronous, survives a kill)
 * and queues it; batches are written every `flushMs` or `flushBatch` entries, each in ONE transaction
 * (usage row unique by request id, ledger charge, user and key counters), so a crash leaves all of a
 * settlement or none of it, and writing one twice is a no-op. Leftover journal segments are replayed
 * at start-up. settleAsync() is record() plus waiting for the commit; settle() writes immediately.
 *
 * With a `durable` sink (PostgreSQL) there is no journal and no local batch: finish() returns the
 * promise of the commit, which the caller awaits before the response or stream ends; until it resolves
 * the cost counts as pending, exactly as a recorded settlement does here.
 */
export class QuotaService {
  private readonly balances = new Map<number, number>();
  private readonly userHeld = new Map<number, number>();
  private readonly keyHeld = new Map<number, number>();
  /** Recorded, not yet committed: already spent as far as reserve() is concerned. */
  private readonly userPending = new Map<number, number>();
  private readonly keyPending = new Map<number, number>();
  /** A limited key's remain_quota as its last reservation saw it (the key record is the identity cache's). */
  private readonly keyRemain = new Map<number, number>();
  /**
   * The key record's remain_quota when keyRemain was taken from it: a record reading otherwise since was written
   * after (an operator's change, or the reload after a commit here) and replaces the snapshot (keyRemainNow).
   */
  private readonly keySeen = new Map<number, number>();
  private queue: Entry[] = [];
  private timer: ReturnType<typeof setTimeout> | null = null;
  private readonly flushMs: number;
  private readonly flushBatch: number;
  /** Durable mode: bumped by every balance heard of (balance.changed), so a slower reload cannot overwrite a newer one. */
  private readonly balanceGen = new Map<number, number>();
  /**
   * Durable mode: balance re-reads. Users changed while one runs are read together, in one query, by the next (a
   * bulk change on another node cost one round trip per user); the full reload of a resync takes those waiting.
   */
  private readonly balanceReads = new BatchedRefresh<number>((ids) => this.readBalances(ids));
  /**
   * Users whose balance was read beyond ±(2^53 − 1) (already rounded by the read): their balance is held as
   * −Infinity, so every check refuses them, and reservations answer 402 balance_inexact. Cleared when a
   * safe value is installed.
   */
  private readonly inexact = new Set<number>();
  /** Limited keys whose inexact remain_quota was already logged (once each, not per refused request). */
  private readonly inexactKeysLogged = new Set<number>();
  /** Request ids with a checkpoint in the unfinished store, dropped when they are settled. */
  private readonly checkpointed = new Set<string>();

  /** A QuotaService over a durable (PostgreSQL) sink, with every user's balance loaded. */
  static async openDurable(deps: Omit<QuotaDeps, 'sink' | 'journal'> & { durable: AsyncSettlementSink }): Promise<QuotaService> {
    const q = new QuotaService(deps);
    for (const u of await deps.durable.balances()) if (!q.balances.has(u.id)) q.install(u.id, u.quota);
    return q;
  }

  constructor(private readonly deps: QuotaDeps) {
    this.flushMs = deps.flushMs ?? 5;
    this.flushBatch = deps.flushBatch ?? 256;
    deps.bus.on('balance.changed', ({ userId, balance }) => {
      // Durable mode cannot load a balance on the request path: a committed one it hears of is kept.
      if (this.balances.has(userId) || deps.durable) this.install(userId, balance);
      if (deps.durable) this.balanceGen.set(userId, (this.balanceGen.get(userId) ?? 0) + 1);
    });
    if (deps.durable) {
      if (deps.sink || deps.journal || deps.unfinished) throw new Error('QuotaService: a durable sink settles alone (no SQLite sink, journal or start-up checkpoints)');
      if (deps.budgets) {
        // Budgets are admitted through the shared store and charged in the sink's transaction.
        if (!deps.holds || !deps.durable.useBudgets) throw new Error('QuotaService: budgets on a durable sink need shared holds and a sink that charges them');
        deps.durable.useBudgets(deps.budgets);
      }
      // Every user, not only cached ones: a user created on another node is loaded as soon as it is heard of.
      // Returned, so a writer awaiting the event (or the change feed's delivery) sees the new balance installed.
      deps.bus.on('user.changed', ({ userId }) => this.reloadBalance(userId));
      return;
    }
    if (!deps.sink) throw new Error('QuotaService: a settlement sink is required');
    deps.bus.on('user.changed', ({ userId }) => {
      // Only users already cached are refreshed; the others load on their first request.
      if (this.balances.has(userId)) this.loadBalance(userId);
    });
    this.replay();
    this.recoverUnfinished();
    // After the replay, so the balances read are the committed ones; a user created later loads on first use.
    for (const u of deps.sink.balances()) this.install(u.id, u.quota);
  }

  /**
   * Every balance read from the database or heard of goes in here. A value beyond ±(2^53 − 1) was rounded on the
   * way (a row written by hand or by another program): logged with the user's id and held as −Infinity, so no
   * request is admitted or charged beyond its hold on it. The check costs one Number.isSafeInteger per load.
   */
  private install(userId: number, quota: number): number {
    if (Number.isSafeInteger(quota)) {
      if (this.inexact.size) this.inexact.delete(userId);
      this.balances.set(userId, quota);
      return quota;
    }
    if (!this.inexact.has(userId)) {
      this.deps.log?.error('balance.inexact', { userId, read: String(quota), cause: 'users.quota is beyond 2^53 - 1: requests are refused (402 balance_inexact) until it is corrected' });
    }
    this.inexact.add(userId);
    this.balances.set(userId, -Infinity);
    return -Infinity;
  }

  private loadBalance(userId: number): number {
    if (!this.deps.sink) {
      // Durable mode reads asynchronously: an unknown user has nothing to spend until its balance arrives.
      this.refreshBalance(userId);
      return this.balances.get(userId) ?? 0;
    }
    const quota = this.deps.sink.balance(userId);
    if (quota === undefined) {
      this.balances.delete(userId);
      return 0;
    }
    return this.install(userId, quota);
  }

  /**
   * Reads the user's committed balance into memory, in a batch that starts after this call (BatchedRefresh), so a
   * writer awaiting its `user.changed` sees its own change installed (a read begun before a redeem's commit left 0).
   * Rejects when the read failed (logged once per batch): a change feed's delivery then resyncs every cache. Callers
   * that only want the balance fresh for later (the request path, a settlement whose outcome is unknown) use
   * refreshBalance, which does not reject.
   */
  private reloadBalance(userId: number): Promise<void> {
    return this.balanceReads.run(userId);
  }

  /** reloadBalance for a caller that does not wait: a failure is already logged, and the next ask reads again. */
  private refreshBalance(userId: number): void {
    this.reloadBalance(userId).catch(() => {});
  }

  /**
   * Re-reads every committed balance (a change feed's resync: a lost notification must not leave a
   * stale balance). Durable mode only; a balance a commit installed meanwhile is kept.
   */
  async reloadBalances(): Promise<void> {
    if (!this.deps.durable) return;
    await this.balanceReads.run(null);
  }

  /** A batch of balance reads (null: every user's); a balance a commit installed meanwhile (balanceGen) is kept. */
  private async readBalances(ids: number[] | null): Promise<void> {
    const durable = this.deps.durable!;
    const gens = new Map(this.balanceGen);
    const unchanged = (id: number) => (this.balanceGen.get(id) ?? 0) === (gens.get(id) ?? 0);
    if (ids === null) {
      // A resync's failure is the resync's: the change feed retries it.
      for (const u of await durable.balances()) if (unchanged(u.id)) this.install(u.id, u.quota);
      return;
    }
    let read: Map<number, number>;
    try {
      read = new Map(durable.balancesOf
        ? (await durable.balancesOf(ids)).map((u) => [u.id, u.quota])
        : (await Promise.all(ids.map(async (id) => [id, await durable.balance(id)] as const))).filter((e): e is [number, number] => e[1] !== undefined));
    } catch (err) {
      // One line per failed batch, not per user in it; rethrown so that a change heard from another node ends in
      // the change feed's resync (a balance cut there must not stay uncut here until the user's next change).
      this.deps.log?.error('balance.load_failed', { userId: ids[0], users: ids.length, cause: errorText(err) });
      throw err;
    }
    for (const id of ids) {
      if (!unchanged(id)) continue;
      const quota = read.get(id);
      if (quota === undefined) this.balances.delete(id);
      else this.install(id, quota);
    }
  }

  /** The user's committed balance (memory: all users are loaded at start, later ones on first use). */
  balance(userId: number): number {
    return this.balances.get(userId) ?? this.loadBalance(userId);
  }

  /** Throws 402 balance_inexact for a user whose balance, or a limited key whose remain_quota, was read inexact. */
  private exactAccount(userId: number, k: QuotaKey): void {
    if (this.inexact.size && this.inexact.has(userId)) throw inexactBalanceError('user');
    if (!k.unlimitedQuota) this.exactKey(k);
  }

  /** A limited key's remain_quota as the key cache read it: beyond ±(2^53 − 1) it was rounded, and is refused. */
  private exactKey(k: QuotaKey): void {
    if (Number.isSafeInteger(k.remainQuota)) return;
    if (!this.inexactKeysLogged.has(k.id)) {
      this.inexactKeysLogged.add(k.id);
      this.deps.log?.error('balance.inexact', { keyId: k.id, read: String(k.remainQuota), cause: 'api_keys.remain_quota is beyond 2^53 - 1: requests with this key are refused (402 balance_inexact) until it is corrected' });
    }
    throw inexactBalanceError('key');
  }

  /** What the user can still reserve now. */
  available(userId: number): number {
    return this.balance(userId) - (this.userPending.get(userId) ?? 0) - (this.userHeld.get(userId) ?? 0);
  }

  /**
   * What the user can still spend now: in one process, available(); with shared holds, the lower of that and what the
   * shared store leaves on every node (this process's view never sees other nodes' holds, so a realtime session asking
   * it ran on with the rest of the balance held elsewhere, and the upstream's next turn ran for a charge capped at 0).
   */
  userAvailable(userId: number): number | Promise<number> {
    const holds = this.deps.holds;
    if (!holds) return this.available(userId);
    return holds.store.available({ userId, keyId: null }).then((a) => Math.min(this.available(userId), a.user ?? Infinity), () => this.available(userId));
  }

  /**
   * What the tightest budget of the key and its owner can still admit now; Infinity when none. In one process, as it
   * counts it. With shared holds, also as every node does (the shared store's spend and holds): this process's book
   * learns other nodes' charges only at its own next commit and never sees their holds, so a realtime session asking it
   * ran on past a budget other nodes had used up, and an unheld charge (a transcription, a response the upstream
   * started) was billed past it. A mirror missing or unreadable leaves this process's count.
   */
  budgetLeft(userId: number, keyId: number): number | Promise<number> {
    const local = this.deps.budgets?.left(userId, keyId) ?? Infinity;
    const holds = this.deps.holds;
    const scopes = holds ? this.deps.budgets?.scopes(userId, keyId) : null;
    if (!scopes) return local;
    return Promise.all(scopes.map((b) => sharedBudgetAvailable(holds!, userId, b)))
      .then((avails) => Math.min(local, ...avails.map((a) => a ?? Infinity)));
  }

  /**
   * What a limited key can still spend now, as a charge's cap reads it: in one process, the remain its last reservation
   * or commit left (else the key record's); with shared holds, what the shared store leaves it on every node (the key
   * record is re-read only after a commit's answer). Infinity for an unlimited key.
   */
  keyAvailable(k: QuotaKey, userId: number): number | Promise<number> {
    if (k.unlimitedQuota) return Infinity;
    const local = () => this.keyRemainNow(k.id, k.remainQuota) - (this.keyPending.get(k.id) ?? 0) - (this.keyHeld.get(k.id) ?? 0);
    const holds = this.deps.holds;
    if (!holds) return local();
    return holds.store.available({ userId, keyId: k.id }).then((a) => a.key ?? local(), () => local());
  }

  /**
   * Holds `amount` for a request; throws (or rejects with) 402 billing_error `quota_exhausted` /
   * `key_quota_exhausted` when short. In this process (SQLite mode): synchronous, no promise and no
   * microtask on the hot path. With shared holds (PostgreSQL mode): a promise, settled by the shared
   * store; 503 `overloaded_error` with `retry-after` while the store cannot vouch for its holds.
   */
  reserve(input: ReserveInput): Reservation | Promise<Reservation> {
    return this.deps.holds ? this.reserveShared(input, this.deps.holds) : this.reserveLocal(input);
  }

  /**
   * Admission against this process's balances only. The SQLite mode's path; in PostgreSQL mode only
   * realtime sessions still use it (their metering does not go through the shared store yet).
   */
  reserveLocal(input: ReserveInput): Reservation {
    const amount = safeCount(input.amount);
    const avail = this.available(input.userId);
    if (amount > avail || avail <= 0) {
      if (this.inexact.has(input.userId)) throw inexactBalanceError('user');
      throw new GatewayError(402, 'quota_exhausted', `Insufficient balance: this request may cost up to ${amount} quota units, ${Math.max(0, avail)} available`);
    }
    const k = input.apiKey;
    if (!k.unlimitedQuota) {
      this.exactKey(k);
      const keyAvail = k.remainQuota - (this.keyPending.get(k.id) ?? 0) - (this.keyHeld.get(k.id) ?? 0);
      if (amount > keyAvail || keyAvail <= 0) {
        throw new GatewayError(402, 'key_quota_exhausted', `API key quota exhausted: this request may cost up to ${amount} quota units, ${Math.max(0, keyAvail)} left on the key`);
      }
    }
    // Last of the checks, as it is the only one that holds something when it passes.
    const budget = this.deps.budgets?.reserve(input.userId, k.id, amount) ?? null;
    if (!k.unlimitedQuota) {
      add(this.keyHeld, k.id, amount);
      this.keyRemain.set(k.id, k.remainQuota);
      this.keySeen.set(k.id, k.remainQuota);
    }
    add(this.userHeld, input.userId, amount);
    return { ref: input.ref, userId: input.userId, keyId: k.id, keyLimited: !k.unlimitedQuota, amount, limits: input.limits, budget, done: false };
  }

  /**
   * Whether the user (and a limited key) could cover `amount` now, holding nothing afterwards: the same 402s
   * as reserve(). In one process a reservation given back at once; with shared holds a read of what every
   * node leaves available, so two admissions checked at the same moment do not refuse each other.
   */
  affords(input: ReserveInput): void | Promise<void> {
    const holds = this.deps.holds;
    if (!holds) return this.release(this.reserveLocal(input));
    return this.affordsShared(input, holds);
  }

  private async affordsShared(input: ReserveInput, holds: SharedHolds, loaded = false): Promise<void> {
    const amount = safeCount(input.amount);
    const k = input.apiKey;
    const limited = !k.unlimitedQuota;
    this.exactAccount(input.userId, k);
    let a: { user: number | null; key: number | null };
    try {
      a = await holds.store.available({ userId: input.userId, keyId: limited ? k.id : null });
    } catch (err) {
      this.deps.log?.warn('quota.admission_failed', { id: input.ref, cause: errorText(err) });
      throw admissionUnavailable(1000);
    }
    // No mirror yet (first use on any node, or after a data loss): a hold of nothing loads it (or says why it
    // cannot), so a concurrent admission never sees this check's amount held.
    if (a.user === null || (limited && a.key === null)) {
      if (!loaded) {
        let r: Reservation;
        try {
          r = await this.reserveShared({ ...input, amount: 0 }, holds);
        } catch (err) {
          // Refused even nothing: nothing is available there; said with this check's amount.
          if (err instanceof GatewayError && err.status === 402) throw shortOf(err.code === 'key_quota_exhausted' ? 'key' : 'user', amount, 0);
          throw err;
        }
        this.unholdLocal(r);
        await this.dropHold(r.hold!);
        return this.affordsShared(input, holds, true);
      }
      throw admissionUnavailable(1000);
    }
    if (shortfall(amount, a.user) !== null) throw shortOf('user', amount, a.user);
    if (limited && shortfall(amount, a.key!) !== null) throw shortOf('key', amount, a.key!);
    // The budgets, as one process checks them: a budget not mirrored yet is checked by the first reservation.
    for (const b of this.deps.budgets?.scopes(input.userId, k.id) ?? []) {
      const avail = await sharedBudgetAvailable(holds, input.userId, b);
      if (avail !== null && shortfall(amount, avail) !== null) throw this.deps.budgets!.exceeded(b.id, amount, avail);
    }
  }

  private async reserveShared(input: ReserveInput, holds: SharedHolds): Promise<Reservation> {
    const amount = safeCount(input.amount);
    const k = input.apiKey;
    const limited = !k.unlimitedQuota;
    // The shared store's mirror holds the same rounded number: refused here, before it is asked.
    this.exactAccount(input.userId, k);
    let res: ReserveResult;
    const budgets = this.deps.budgets?.scopes(input.userId, k.id) ?? undefined;
    try {
      res = await holds.store.reserve({ userId: input.userId, keyId: limited ? k.id : null, amount, ref: input.ref, leaseMs: holds.leaseMs, budgets });
    } catch (err) {
      // Redis or the balance read failed: nothing can be vouched for, so nothing is admitted.
      this.deps.log?.warn('quota.admission_failed', { id: input.ref, cause: errorText(err) });
      throw admissionUnavailable(1000);
    }
    if (!res.ok) {
      if (res.reason === 'unavailable') throw admissionUnavailable(res.retryAfterMs);
      if (res.scope === 'budget') throw this.deps.budgets!.exceeded(res.budgetId, amount, res.available);
      throw shortOf(res.scope, amount, res.available);
    }
    holds.live.track(res.hold);
    // Also counted here, so this process's view (available(), realtime's local admission) sees its own holds.
    add(this.userHeld, input.userId, amount);
    if (limited) add(this.keyHeld, k.id, amount);
    return { ref: input.ref, userId: input.userId, keyId: k.id, keyLimited: limited, amount, limits: input.limits, budget: null, done: false, hold: res.hold };
  }

  /**
   * Drops a shared hold, installing the mirrors read after the commit that consumed it. Never throws. A release
   * lost in a Redis blip is retried in the background until it lands or the hold's lease is over: left alone,
   * the hold (its worst case, not the charge) kept counting against the user on every node until it lapsed and
   * the reconciler released it (HOLD_LEASE_MS and more). A release is idempotent per hold (a second one finds no
   * hold, and installs a mirror only over an older one), so a retry that races the reconciler changes nothing.
   */
  private async dropHold(hold: Hold, after?: AfterCommit): Promise<void> {
    const holds = this.deps.holds!;
    // Untracked before the release is sent, and sent after the renewals in flight have their answer: a renewal
    // re-registers holds it finds missing (LiveHolds.release). Retries go later still.
    try {
      await holds.live.release(hold, after);
    } catch (err) {
      this.deps.log?.warn('hold.release_failed', { id: hold.ref, msg: 'retried until its lease lapses, then left to the reconciler', cause: errorText(err) });
      void retryFor(() => holds.store.release(hold, after), holds.leaseMs, () => this.closed).catch(() => { /* the reconciler's, after the lease */ });
    }
  }

  /**
   * The mirrors of a commit that no hold's release installed: a charge without a hold (a realtime
   * response never announced, a reservation already given back), or a key the hold did not cover
   * because it was unlimited at admission and limited at commit. Only ever a newer version over an
   * existing mirror, as a release does; without this the shared store would keep the balance from
   * before the charge and admit that money again on every node. Never throws: the next commit or
   * balance move of the user (or key) installs a newer one.
   */
  private async installUnheld(row: SettlementRow, hold: Hold | undefined, mirror: AfterCommit): Promise<void> {
    const store = this.deps.holds!.store;
    try {
      if (mirror.user && !hold) await store.applyBalance({ userId: row.userId }, mirror.user, { ifPresent: true });
      if (mirror.key && hold?.keyId !== row.apiKeyId) await store.applyBalance({ userId: row.userId, keyId: row.apiKeyId }, mirror.key, { ifPresent: true });
      // A budget set after admission (or a charge without a hold) still counts toward it: its new spend too.
      for (const b of mirror.budgets ?? []) if (!hold?.budgetIds?.includes(b.id)) await store.applyBudget(row.userId, b);
    } catch (err) {
      this.deps.log?.warn('hold.mirror_failed', { id: row.requestId, cause: errorText(err) });
    }
  }

  /** Returns the held amount; idempotent. */
  release(r: Reservation): void {
    if (r.done) return;
    this.unholdLocal(r);
    if (r.budget) this.deps.budgets?.release(r.budget);
    // Nothing was settled: a shared hold goes without a new balance (none changed).
    if (r.hold) void this.dropHold(r.hold);
  }

  private unholdLocal(r: Reservation): void {
    r.done = true;
    add(this.userHeld, r.userId, -r.amount);
    if (r.keyLimited) add(this.keyHeld, r.keyId, -r.amount);
  }

  /**
   * Most a settlement may charge: its reservation plus what the user (and a limited key) can still
   * spend besides. So a balance that starts non-negative stays non-negative, whatever the upstream reports.
   */
  private chargeCap(r: Reservation | null, userId: number, key: { id: number; limited: boolean }): number {
    const held = r && !r.done ? r.amount : 0;
    let cap = held + Math.max(0, this.available(userId));
    if (key.limited) {
      const remain = this.keyRemain.get(key.id);
      if (remain !== undefined) cap = Math.min(cap, held + Math.max(0, remain - (this.keyPending.get(key.id) ?? 0) - (this.keyHeld.get(key.id) ?? 0)));
    }
    // Budgets cap like a limited key: a charge never takes a budget past its limit.
    if (this.deps.budgets) cap = Math.min(cap, this.deps.budgets.cap(r && !r.done ? r.budget ?? null : null, userId, key.id));
    return cap;
  }

  /**
   * A limited key's remain as a charge without a hold is capped by: the snapshot, which follows this process's
   * commits before the key record is reloaded, unless the record was written since it was taken. Before, only a
   * reservation renewed the snapshot, so a transcription-only session whose key an operator raised kept being
   * capped at the old remain (billed short, then ended key_quota_exhausted).
   */
  private keyRemainNow(keyId: number, record: number): number {
    const snap = this.keyRemain.get(keyId);
    if (snap !== undefined && this.keySeen.get(keyId) === record) return snap;
    this.keyRemain.set(keyId, record);
    this.keySeen.set(keyId, record);
    return record;
  }

  private entry(r: Reservation | null, log: UsageLogInput): Entry {
    if (!r && log.keyLimited && log.keyRemain !== undefined) this.keyRemainNow(log.apiKeyId, log.keyRemain);
    const limits = log.limits ?? r?.limits ?? null;
    const g = guardUsage(log.usage, { ...log.estimate, input: log.estimate?.input ?? limits?.input }, limits, log.estimated);
    const u = g.usage;
    const ratio = log.ratio ?? RATIO_ONE;
    const price = log.price === null ? undefined : log.price ?? this.deps.prices.get(log.billedModel || log.model);
    const priced = priceUsage(u, price, ratio, this.deps.prices.webSearchPrice(price), limits?.samplingInput);
    let cost = priced.cost;
    // A shared hold is capped by the shared store at settlement (settleDurable), against every node's holds.
    const cap = r?.hold && !r.done ? Infinity : this.chargeCap(r, log.userId, { id: log.apiKeyId, limited: r ? r.keyLimited : log.keyLimited === true });
    if (cost > cap) {
      cost = cap;
      g.flags.push('capped');
    }
    const row: SettlementRow = {
      requestId: log.requestId, kind: log.kind ?? 'messages', userId: log.userId, apiKeyId: log.apiKeyId,
      channelId: log.channelId, model: log.model, upstreamModel: log.upstreamModel, stream: log.stream,
      inputTokens: u.input, outputTokens: u.output, cacheReadTokens: u.cacheRead, cacheWriteTokens: u.cacheWrite,
      cacheWrite1hTokens: u.cacheWrite1h, longContext: priced.longContext, audioInputTokens: u.audioInput, audioOutputTokens: u.audioOutput,
      webSearchRequests: u.webSearch, codeExecutionRequests: u.codeExecution, cost, latencyMs: log.latencyMs, ttftMs: log.ttftMs,
      status: log.status, errorCode: log.errorCode, usageFlag: g.flags.join(','), attempts: log.attempts, ip: log.ip, createdAt: nowSeconds(),
      group: log.group ?? '', priceRatio: ratio, billedModel: log.billedModel ?? '', overrides: log.overrides ?? '',
    };
    return { r, row, limitedKey: r ? r.keyLimited : true, capKey: !r && log.keyLimited === true, inserted: false, balance: null, error: undefined, budgetIds: null, budget: null, waiters: [] };
  }

  /**
   * Records a finished request durably and releases its reservation; the database write follows
   * within `flushMs`. Returns the cost. Its money stays unspendable until then (pending).
   */
  record(r: Reservation | null, log: UsageLogInput): number {
    if (this.deps.durable) throw new Error('QuotaService.record: a durable sink settles through finish()');
    return this.enqueue(this.entry(r, log)).row.cost;
  }

  /** record() and wait for the commit: resolves with the outcome, rejects when the write failed (nothing charged). */
  settleAsync(r: Reservation | null, log: UsageLogInput): Promise<Settlement> {
    const e = this.entry(r, log);
    if (this.deps.durable) return this.settleDurable(e);
    return new Promise((done, fail) => {
      e.waiters.push({ done, fail });
      this.enqueue(e);
    });
  }

  /** Bills a finished request now, exactly once, and releases its reservation. Throws if the write failed (nothing charged). */
  settle(r: Reservation | null, log: UsageLogInput): Settlement {
    if (this.deps.durable) throw new Error('QuotaService.settle is synchronous: a durable sink settles through finish()');
    this.flush();
    const e = this.entry(r, log);
    this.deps.observe?.(e.row);
    try {
      this.write([e]);
    } finally {
      if (r) this.release(r);
      // Written or failed for good ("nothing charged"): either way the next start must not bill it.
      this.dropCheckpoint(log.requestId);
    }
    if (e.error) throw e.error;
    return { cost: e.inserted ? e.row.cost : 0, duplicate: !e.inserted };
  }

  /**
   * Bills a finished request exactly once and releases its reservation, for a caller that needs the
   * outcome (realtime: a session's cost, whether its balance is spent). With the SQLite sink this is
   * settle(): written before it returns. With a durable sink, the promise of the commit; the cost counts
   * as pending from this call on, so available() already excludes it. Rejects (or throws) when the write
   * failed: nothing charged, or an unknown outcome.
   */
  settleNow(r: Reservation | null, log: UsageLogInput): Settlement | Promise<Settlement> {
    return this.deps.durable ? this.settleDurable(this.entry(r, log)) : this.settle(r, log);
  }

  /**
   * The end of a metered request: with the SQLite sink, record() (journaled, durable on return; no
   * promise, no microtask); with a durable sink, the promise of the commit, to await before the
   * response or stream ends. Rejects when the write failed (nothing charged, or an unknown outcome).
   */
  finish(r: Reservation | null, log: UsageLogInput): number | Promise<Settlement> {
    if (!this.deps.durable) return this.enqueue(this.entry(r, log)).row.cost;
    return this.settleDurable(this.entry(r, log));
  }

  private async settleDurable(e: Entry): Promise<Settlement> {
    const { row } = e;
    const reserved = e.r && !e.r.done ? e.r.hold : undefined;
    // A charge without a live hold (a realtime response started or asked for whose hold was refused, a transcription):
    // a hold of nothing lets the shared store cap it against every node's holds and charges, as a held one is; capped
    // by this node's view alone, two nodes' such charges could each take the whole balance (tested over 3 nodes).
    const hold = reserved ?? (this.deps.holds && row.cost > 0 ? await this.holdNothing(e) : undefined);
    if (hold) {
      // The hold stays in the shared store until the commit: it becomes the (capped) charge now.
      await this.capByHold(e, hold);
      // Here it turns into the pending cost below, as a local reservation does.
      if (reserved) this.unholdLocal(e.r!);
    }
    this.deps.observe?.(row);
    // Pending until committed, as a journaled settlement is: reserve() cannot spend it meanwhile.
    add(this.userPending, row.userId, row.cost);
    if (e.limitedKey) add(this.keyPending, row.apiKeyId, row.cost);
    if (e.r) this.release(e.r);
    let mirror: AfterCommit | undefined;
    try {
      const out = await this.deps.durable!.settle(row);
      e.inserted = out.inserted;
      if (out.inserted && out.balance !== undefined) e.balance = out.balance;
      if (out.inserted) {
        mirror = { ...out.mirror, budgets: out.budget?.updates };
        e.budget = out.budget ?? null;
      }
    } catch (err) {
      // The outcome may be unknown (database unreachable): the balance is read again rather than guessed.
      this.refreshBalance(row.userId);
      this.deps.log?.error('settlement.failed', { id: row.requestId, msg: 'not confirmed as charged', cause: errorText(err), row: JSON.stringify(row) });
      // The hold is neither dropped nor renewed: after its lease the reconciler looks the request id up
      // in the ledger and releases it with the committed balance, whichever way this write went.
      if (hold) this.deps.holds!.live.untrack(hold);
      // Its checkpoint, if any, stays for the leader (above); only this process forgets it.
      this.checkpointed.delete(row.requestId);
      throw err;
    } finally {
      add(this.userPending, row.userId, -row.cost);
      if (e.limitedKey) add(this.keyPending, row.apiKeyId, -row.cost);
    }
    // Committed (or found already written): a checkpoint kept for it is deleted. Not after a failure: its outcome is
    // unknown, the hold is left to lapse, and the leader bills the checkpoint then unless this settlement committed.
    this.dropCheckpoint(row.requestId);
    // The charge is committed: the hold goes and the balance it left is installed, in one step.
    if (hold) await this.dropHold(hold, mirror);
    if (mirror && this.deps.holds) await this.installUnheld(row, hold, mirror);
    this.afterCommit([e]);
    return { cost: e.inserted ? row.cost : 0, duplicate: !e.inserted };
  }

  /**
   * A hold of 0 for a charge that has none, under the request id (the reconciler's key): its settlement is then
   * capped by the shared store. Refused for want of money: nothing is left to spend anywhere, the charge is 0
   * (`capped`). The store unreachable: none, and this node's view caps the charge, as before.
   */
  private async holdNothing(e: Entry): Promise<Hold | undefined> {
    const { row } = e;
    const holds = this.deps.holds!;
    let res: ReserveResult;
    try {
      res = await holds.store.reserve({ userId: row.userId, keyId: e.capKey ? row.apiKeyId : null, amount: 0, ref: row.requestId, leaseMs: holds.leaseMs });
    } catch (err) {
      this.deps.log?.warn('hold.cap_unavailable', { id: row.requestId, msg: 'charge capped by this node', cause: errorText(err) });
      return undefined;
    }
    if (!res.ok) {
      if (res.reason === 'short' && (res.scope === 'user' || (e.capKey && res.scope === 'key'))) {
        row.cost = 0;
        row.usageFlag = withFlag(row.usageFlag, 'capped');
      }
      return undefined;
    }
    holds.live.track(res.hold);
    return res.hold;
  }

  /**
   * Caps the row's cost with the shared store (the hold plus what the user and key can still spend
   * besides, every node's holds counted). If the store cannot answer (Redis unreachable), the hold itself
   * caps it: only the hold is known to be set aside on every node, and this process cannot see the others'
   * holds. If the store no longer knows the hold (lost with Redis's data), this process's view caps it.
   */
  private async capByHold(e: Entry, hold: Hold): Promise<void> {
    const { row } = e;
    // Within its hold a cost needs no cap (every cap is at least the hold): no round trip. The hold keeps
    // counting its worst case until the release after the commit, which only errs on the safe side.
    if (row.cost <= hold.amount) return;
    let charged: number | null = null;
    try {
      charged = await this.deps.holds!.store.settle(hold, row.cost, this.deps.budgets?.scopes(row.userId, row.apiKeyId) ?? undefined);
    } catch (err) {
      this.deps.log?.warn('hold.settle_failed', { id: row.requestId, msg: 'charge capped at its hold', cause: errorText(err) });
      charged = hold.amount;
    }
    // null: the store no longer knows the hold (lost, or reconciled while this node stalled).
    const cap = charged ?? Math.min(row.cost, hold.amount + Math.max(0, this.available(row.userId)));
    if (cap < row.cost) {
      row.cost = cap;
      row.usageFlag = row.usageFlag ? `${row.usageFlag},capped` : 'capped';
    }
  }

  private enqueue(e: Entry): Entry {
    this.deps.journal?.append(e.row);
    this.deps.observe?.(e.row);
    add(this.userPending, e.row.userId, e.row.cost);
    if (e.limitedKey) add(this.keyPending, e.row.apiKeyId, e.row.cost);
    e.budgetIds = this.deps.budgets?.pend(e.row.userId, e.row.apiKeyId, e.row.cost) ?? null;
    if (e.r) this.release(e.r);
    this.queue.push(e);
    if (this.queue.length >= this.flushBatch) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), this.flushMs);
    return e;
  }

  /** Writes every queued settlement now (also on shutdown and before reads that must see them). */
  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const batch = this.queue;
    if (!batch.length) return;
    this.queue = [];
    // The open segment is kept across batches (a file per batch cost a create and an unlink every flush);
    // those sealed since the last batch (full) are deleted once this batch, their last, has committed.
    const sealed = this.deps.journal?.rotate() ?? [];
    this.write(batch);
    let failed = false;
    for (const e of batch) {
      failed ||= e.error !== undefined;
      add(this.userPending, e.row.userId, -e.row.cost);
      if (e.limitedKey) add(this.keyPending, e.row.apiKeyId, -e.row.cost);
      this.deps.budgets?.unpend(e.budgetIds, e.row.cost);
      if (e.error) this.deps.log?.error('settlement.failed', { id: e.row.requestId, msg: 'nothing charged', cause: errorText(e.error), row: JSON.stringify(e.row) });
      for (const w of e.waiters) {
        if (e.error) w.fail(e.error);
        else w.done({ cost: e.inserted ? e.row.cost : 0, duplicate: !e.inserted });
      }
      // Written or failed for good (as in settle()): a long stream's checkpoint must not bill it at the next start.
      if (this.checkpointed.size) this.dropCheckpoint(e.row.requestId);
    }
    // A settlement that failed for good was answered "nothing charged": a later replay must not charge it,
    // so its segment goes now rather than when full. Nothing was appended during the (synchronous) write,
    // so the open segment holds only this batch and earlier, committed ones.
    if (failed) sealed.push(...this.deps.journal?.rotate(true) ?? []);
    // Every settlement of these segments is now committed (or failed for good and logged above).
    for (const path of sealed) this.deps.journal!.discard(path);
  }

  /** Whether checkpoint() keeps anything (SQLite with an unfinished store, PostgreSQL with a checkpoint store). */
  get keepsUnfinished(): boolean {
    return !!this.checkpointStore;
  }

  private get checkpointStore(): CheckpointStore | null {
    return (this.deps.durable ? this.deps.checkpoints : this.deps.unfinished) ?? null;
  }

  /** Settlements commit after finish() returns (a durable sink): answers hold their end until then. */
  get commitsLater(): boolean {
    return this.deps.durable !== undefined;
  }

  private closed = false;

  /** Settlements recorded but not yet written to the database. */
  get queued(): number {
    return this.queue.length;
  }

  /** Writes what is queued and releases the journal (shutdown). */
  close(): void {
    // A hold release still being retried stops here: the connection goes next, and the reconciler has it after the lease.
    this.closed = true;
    this.flush();
    try {
      this.deps.unfinished?.flush();
    } catch (err) {
      // Not fatal to the shutdown: the journal still closes and the database after it.
      this.deps.log?.error('settlement.unfinished_write_failed', { cause: errorText(err), msg: 'checkpoints not written at shutdown' });
    }
    this.deps.journal?.close();
  }

  /**
   * Keeps what a request still running would be billed if this process died now (`log`: its estimate so far),
   * replacing its previous checkpoint; settle() under the same request id drops it. Capped by the request's
   * live hold, the money set aside for it (nothing for a request without one: nothing is kept): the rest of the
   * balance may be spent by others before the next start, and a hold never is. SQLite: written at once, billed at the
   * next start. PostgreSQL: queued (the store writes it off this path), kept under the shared hold's ref, billed by the
   * leader once that hold lapses; a reservation without a shared hold keeps nothing.
   */
  checkpoint(r: Reservation | null, log: UsageLogInput): void {
    const store = this.checkpointStore;
    if (!store || !r || r.done || (this.deps.durable && !r.hold)) return;
    const { row } = this.entry(r, log);
    if (row.cost > r.amount) {
      row.cost = r.amount;
      row.usageFlag = withFlag(row.usageFlag, 'capped');
    }
    store.put(row, r.hold?.ref);
    this.checkpointed.add(row.requestId);
  }

  /**
   * Drops a request's checkpoint: on its settlement (here), or when its settlement could not even be recorded (the
   * relay answered it "nothing charged", so it must not be billed later from the checkpoint). Never throws: thrown
   * out of settle(), a failed delete turned a written settlement into "nothing charged" for the caller. The row left
   * is skipped at the next start when its settlement was written (its request id is billed).
   */
  dropCheckpoint(requestId: string): void {
    if (!this.checkpointed.delete(requestId)) return;
    try {
      this.checkpointStore!.drop(requestId);
    } catch (err) {
      this.deps.log?.error('settlement.unfinished_drop_failed', { id: requestId, cause: errorText(err), msg: 'left for the next start, which skips it if billed' });
    }
  }

  /**
   * Bills the checkpoints a killed process left (requests it was running, never settled): once each, on the
   * estimate kept, skipping request ids already billed (settled before the kill, or by an earlier recovery that
   * died before emptying the store). Runs at start-up after the journal replay, before anything is admitted.
   */
  private recoverUnfinished(): void {
    const store = this.deps.unfinished;
    if (!store) return;
    const left = store.left();
    if (!left.length) return;
    const rows: SettlementRow[] = [];
    for (const { requestId, row } of left) {
      if (row) rows.push(row);
      else this.deps.log?.error('settlement.unfinished_unreadable', { id: requestId, msg: 'not a settlement this gateway wrote: skipped, nothing billed' });
    }
    const entries = rows.map(writtenLater);
    this.write(entries);
    for (const e of entries) if (e.error) this.deps.log?.error('settlement.unfinished_failed', { id: e.row.requestId, cause: errorText(e.error), row: JSON.stringify(e.row) });
    this.deps.log?.info('settlement.unfinished_billed', { billed: entries.filter((e) => e.inserted).length, found: left.length, msg: 'requests a killed process was running; the rest were already billed' });
    store.clear();
  }

  /** Writes settlements journaled by a previous process that did not commit them (crash or kill). */
  private replay(): void {
    for (const { path, rows } of this.deps.journal?.leftovers() ?? []) {
      const entries = rows.map(writtenLater);
      this.write(entries);
      const replayed = entries.filter((e) => e.inserted).length;
      if (rows.length) this.deps.log?.info('settlement.replayed', { replayed, journaled: rows.length, path, msg: 'the rest were already written' });
      for (const e of entries) if (e.error) this.deps.log?.error('settlement.replay_failed', { id: e.row.requestId, cause: errorText(e.error), row: JSON.stringify(e.row) });
      this.deps.journal!.discard(path, true);
    }
  }

  private write(entries: Entry[]): void {
    const { budgets } = this.deps;
    const sink = this.deps.sink!;
    const writeOne = (e: Entry) => {
      const r = sink.apply(e.row);
      e.inserted = r.inserted;
      if (r.inserted && r.balance !== undefined) e.balance = r.balance;
      // In the same transaction: a budget's spend and its alerts commit (or roll back) with the charge.
      if (r.inserted && e.row.cost > 0 && budgets) e.budget = budgets.commit(e.row, r.balance);
    };
    try {
      // Fast path: the whole batch in one transaction.
      sink.transaction(() => { for (const e of entries) writeOne(e); });
    } catch (batchErr) {
      // Something in the batch failed and the transaction rolled back: settle each entry on its own,
      // so one bad entry cannot cost the others their settlement.
      for (const e of entries) {
        e.inserted = false;
        e.balance = null;
        e.budget = null;
        try {
          sink.transaction(() => writeOne(e));
        } catch (err) {
          e.error = err;
          e.inserted = false;
          e.balance = null;
          e.budget = null;
        }
      }
      if (entries.length === 1) entries[0]!.error ??= batchErr;
    }
    this.afterCommit(entries);
  }

  /** Installs what committed entries did: balances, limited keys' remain, budgets, events. */
  private afterCommit(entries: Entry[]): void {
    const { budgets } = this.deps;
    const balances = new Map<number, number>();
    const keysChanged = new Set<number>();
    for (const e of entries) {
      if (!e.inserted || e.row.cost <= 0) continue;
      // Entries are in commit order, so the last balance of a user is the current one.
      if (e.balance !== null) balances.set(e.row.userId, e.balance);
      // Only a limited key's remain_quota matters to the request path; an unlimited key's cached
      // used_quota is informational and is not refreshed per request (the API reads it from the table).
      if (e.limitedKey) {
        keysChanged.add(e.row.apiKeyId);
        // The key's stored remain_quota dropped by the cost: so must the snapshot the charge cap reads, or a
        // reservation taken before this commit would be capped against the old, larger budget.
        const remain = this.keyRemain.get(e.row.apiKeyId);
        if (remain !== undefined) this.keyRemain.set(e.row.apiKeyId, remain - e.row.cost);
      }
    }
    const alerts: AlertEvent[] = [];
    for (const e of entries) {
      if (!e.budget) continue;
      budgets!.applyCommitted(e.budget);
      alerts.push(...e.budget.events);
    }
    if (alerts.length) this.deps.onAlerts?.(alerts);
    // Not awaited: metering stays synchronous. balance.changed listeners are synchronous; the key index
    // re-reads a limited key's row in the background (until then it serves the previous remain_quota,
    // which only the charge cap reads, and keyRemain above already has the new one).
    for (const [userId, balance] of balances) this.emitInBackground('balance.changed', { userId, balance });
    for (const keyId of keysChanged) this.emitInBackground('apikey.changed', { keyId });
  }

  /** A refresh that fails goes to the bus's repairs (a full resync), as for any committed write; else it is logged. */
  private emitInBackground<K extends 'balance.changed' | 'apikey.changed'>(event: K, payload: ChangeEvents[K]): void {
    const done = this.deps.bus.committed(event, payload);
    done.catch((err) => this.deps.log?.error('cache.refresh_failed', { event, cause: errorText(err) }));
  }
}

export type ReserveInput = { userId: number; apiKey: QuotaKey; amount: number; ref: string; limits?: UsageLimits };

/** reserve()'s refusal for lack of money, worded as in one process. */
function shortOf(scope: 'user' | 'key', amount: number, available: number): GatewayError {
  if (scope === 'user') {
    return new GatewayError(402, 'quota_exhausted', `Insufficient balance: this request may cost up to ${amount} quota units, ${Math.max(0, available)} available`);
  }
  return new GatewayError(402, 'key_quota_exhausted', `API key quota exhausted: this request may cost up to ${amount} quota units, ${Math.max(0, available)} left on the key`);
}

/**
 * A settlement a previous process left to write (a journal line, a checkpoint): no hold (it died with that process);
 * counted against the key as a limited one's, which is what it was if its key has a remain_quota.
 */
const writtenLater = (row: SettlementRow): Entry =>
  ({ r: null, row, limitedKey: true, inserted: false, balance: null, error: undefined, budgetIds: null, budget: null, waiters: [] });

/** The shared store cannot admit now (Redis unreachable, or recovering from a data loss). */
function admissionUnavailable(retryAfterMs: number): GatewayError {
  return new GatewayError(503, 'quota_unavailable', 'Quota admission is briefly unavailable while balances are re-checked; retry shortly', {
    type: 'overloaded_error', headers: { 'retry-after': String(Math.max(1, Math.ceil(retryAfterMs / 1000))) },
  });
}

function add(m: Map<number, number>, id: number, by: number): void {
  const v = (m.get(id) ?? 0) + by;
  if (v <= 0) m.delete(id);
  else m.set(id, v);
}

/** What `b` can still admit as every node counts it (spend and holds in the shared store); null: no mirror yet, or unreadable. */
async function sharedBudgetAvailable(holds: SharedHolds, userId: number, b: BudgetScope): Promise<number | null> {
  const u = await holds.store.budgetUsage(userId, b.id).catch(() => null);
  return u ? budgetAvailable(b, u, u.held) : null;
}
