/**
 * Budgets on the request path: every budget and low-balance threshold in memory (no DB read per
 * request), the amounts held for requests in flight and recorded-but-uncommitted, and the writes a
 * charge makes to them inside the settlement transaction.
 *
 * Admission is QuotaService's rule applied to each budget of the key and of its owner: a request's
 * worst case must fit in `limit − spent(this period) − pending − held`, so concurrent requests can
 * never spend past a budget. Held and pending amounts are kept by budget id, apart from the budget
 * record, so an operator changing a budget does not forget what is in flight.
 */
import { GatewayError, type Logger } from '@gw/core';
import type { AsyncBudgetCharges, BudgetChargeResult, BudgetChargesRepo, BudgetRow, LowBalanceRow, SettlementRow } from '@gw/db';
import type { BudgetScope } from '../holds/port';
import { periodEnd, periodEndOfKey, periodKey, type BudgetPeriod } from './period';
import { reachedMask, thresholdsOf } from './thresholds';

interface BudgetState {
  id: number;
  scope: 'user' | 'key';
  subjectId: number;
  period: BudgetPeriod;
  limit: number;
  periodKey: string;
  spent: number;
}

/** A request's hold on the budgets that applied when it was admitted. */
export interface BudgetHold {
  readonly ids: number[];
  readonly amount: number;
}

/** An alert written to the outbox by a charge (delivered after the commit). */
export interface AlertEvent {
  id: string;
  type: 'budget.threshold' | 'balance.low';
  created_at: number;
  data: Record<string, unknown>;
}

/** What one charge did to budgets: installed in memory once its transaction commits. */
export interface BudgetEffects {
  updates: Array<{ id: number; periodKey: string; spent: number }>;
  events: AlertEvent[];
}

/** Where the book reads every budget and threshold: SQLite's repo answers at once, PostgreSQL's with a promise. */
export interface BudgetSource {
  all(): BudgetRow[] | Promise<BudgetRow[]>;
  lowBalanceAll(): LowBalanceRow[] | Promise<LowBalanceRow[]>;
}

export interface BudgetBookDeps {
  repo: BudgetSource;
  /** SQLite: the charges written inside the settlement batch. PostgreSQL passes its own per transaction (commitWith). */
  charges?: BudgetChargesRepo;
  /** Whether alerts will be delivered (a webhook is configured); otherwise they are recorded as 'skipped'. */
  deliver: boolean;
  now?: () => number;
  log?: Logger;
}

/**
 * Threshold alerts one budget subject (a user or a key, per period kind) may write in one period: three
 * full rounds of 50/80/100 %. A key's owner sets and clears its budgets at will, and a new or re-limited
 * budget is announced afresh, so without a bound one cheap request per round floods the webhook (and the
 * one worker that delivers every operator's alerts). Low-balance alerts: as many per user and UTC day.
 */
export const MAX_THRESHOLD_ALERTS_PER_PERIOD = 9;

/**
 * Threshold alerts of all the key budgets of one owner in one period (per period kind). A key deleted and a new
 * one created is a new subject with its own share, so without this bound rotating keys floods all the same.
 */
export const MAX_KEY_ALERTS_PER_OWNER_PER_PERIOD = 30;

/**
 * A cap an alert counts against: `key` (`scope:subject:period kind`, `keys-of:owner:period kind`, `low:user:daily`)
 * in its period. Counted in the database in the charge's transaction (table alert_caps), so every node and every
 * restart sees one count; it outlives a cleared budget or a deleted key.
 */
interface AlertCap { key: string; periodKey: string; expiresAt: number; max: number }

/** An alert a charge would write, once its caps allow it. */
interface PendingAlert { caps: AlertCap[]; event: AlertEvent; suppressed: Record<string, string | number> }

const newEventId = () => `evt_${crypto.randomUUID().replaceAll('-', '')}`;

export class BudgetBook {
  private byUser = new Map<number, BudgetState[]>();
  private byKey = new Map<number, BudgetState[]>();
  private lowBalance = new Map<number, number>();
  private byId = new Map<number, BudgetState>();
  private readonly held = new Map<number, number>();
  private readonly pending = new Map<number, number>();
  private readonly now: () => number;
  private refreshing: Promise<void> | null = null;
  private refreshAgain = false;

  /** A book over a synchronous source (SQLite) is loaded here; over an asynchronous one, await reload() first. */
  constructor(private readonly d: BudgetBookDeps) {
    this.now = d.now ?? Date.now;
    const rows = d.repo.all();
    const low = d.repo.lowBalanceAll();
    if (!(rows instanceof Promise) && !(low instanceof Promise)) this.install(rows, low);
    else void Promise.all([rows, low]).catch(() => {});
  }

  /**
   * Re-reads every budget and threshold (after a management change, or another node's; the tables are
   * small). Synchronous over SQLite. Over PostgreSQL reads never overlap, and one asked for during a read
   * runs again after it, so a slower, older read can never install over a newer one; it rejects when the
   * database cannot be read (the previous book stays in force).
   */
  reload(): void | Promise<void> {
    const rows = this.d.repo.all();
    const low = this.d.repo.lowBalanceAll();
    if (!(rows instanceof Promise) && !(low instanceof Promise)) return this.install(rows, low);
    return this.refresh(Promise.all([rows, low]));
  }

  private refresh(first: Promise<[BudgetRow[], LowBalanceRow[]]>): Promise<void> {
    if (this.refreshing) {
      first.catch(() => {});
      this.refreshAgain = true;
      return this.refreshing.then(() => this.refreshing ?? undefined);
    }
    this.refreshing = (async () => {
      let read = first;
      for (;;) {
        this.refreshAgain = false;
        const [rows, low] = await read;
        this.install(rows, low);
        if (!this.refreshAgain) return;
        read = Promise.all([this.d.repo.all(), this.d.repo.lowBalanceAll()]);
      }
    })().finally(() => { this.refreshing = null; });
    return this.refreshing;
  }

  private install(rows: BudgetRow[], lowRows: LowBalanceRow[]): void {
    const byUser = new Map<number, BudgetState[]>();
    const byKey = new Map<number, BudgetState[]>();
    for (const r of rows) {
      const m = r.scope === 'key' ? byKey : byUser;
      const list = m.get(r.subjectId) ?? [];
      list.push(toState(r));
      m.set(r.subjectId, list);
    }
    this.byUser = byUser;
    this.byKey = byKey;
    this.byId = new Map([...byUser.values(), ...byKey.values()].flat().map((b) => [b.id, b]));
    this.lowBalance = new Map(lowRows.map((r) => [r.userId, r.threshold]));
  }

  /**
   * The budgets a request of this key is admitted against, for a shared store (PostgreSQL mode): each
   * with its limit and the current period; what was spent is the store's. null = none applies.
   */
  scopes(userId: number, keyId: number): BudgetScope[] | null {
    const list = this.budgetsOf(userId, keyId);
    if (!list) return null;
    const t = this.now();
    return list.map((b) => ({ id: b.id, limit: b.limit, periodKey: periodKey(b.period, t) }));
  }

  /** The 402 of a budget a shared store found short; a budget the book no longer has is said generically. */
  exceeded(budgetId: number, amount: number, available: number): GatewayError {
    const b = this.byId.get(budgetId);
    if (b) return exceeded(b, amount, available, this.now());
    return new GatewayError(402, 'budget_exceeded', `A budget of this key or its owner is used up: this request may cost up to ${amount} quota units, ${Math.max(0, available)} left`);
  }

  /** The ids of the budgets a charge of this key counts against. */
  budgetIds(userId: number, keyId: number): number[] {
    return this.budgetsOf(userId, keyId)?.map((b) => b.id) ?? [];
  }

  /** The budgets of a key, then of its owner. */
  private budgetsOf(userId: number, keyId: number): BudgetState[] | null {
    const k = this.byKey.get(keyId);
    const u = this.byUser.get(userId);
    if (!k && !u) return null;
    return k && u ? [...k, ...u] : (k ?? u)!;
  }

  /** What the budget can still admit now: limit − spent this period − pending − held (may be negative). */
  private available(b: BudgetState, nowMs: number): number {
    const spent = b.periodKey === periodKey(b.period, nowMs) ? b.spent : 0;
    return b.limit - spent - (this.pending.get(b.id) ?? 0) - (this.held.get(b.id) ?? 0);
  }

  /** What the tightest budget of the key and its owner can still admit now (may be negative); Infinity when none applies. */
  left(userId: number, keyId: number): number {
    const t = this.now();
    return Math.min(Infinity, ...(this.budgetsOf(userId, keyId) ?? []).map((b) => this.available(b, t)));
  }

  /**
   * Holds `amount` on every budget of the key and its owner, or throws 402 `key_budget_exceeded` /
   * `user_budget_exceeded` (with `retry-after`: seconds until the period resets). null = no budget applies.
   */
  reserve(userId: number, keyId: number, amount: number): BudgetHold | null {
    const list = this.budgetsOf(userId, keyId);
    if (!list) return null;
    const t = this.now();
    for (const b of list) {
      const avail = this.available(b, t);
      if (amount > avail || avail <= 0) throw exceeded(b, amount, avail, t);
    }
    for (const b of list) add(this.held, b.id, amount);
    return { ids: list.map((b) => b.id), amount };
  }

  release(h: BudgetHold): void {
    for (const id of h.ids) add(this.held, id, -h.amount);
  }

  /**
   * Most a charge may take within the budgets it was admitted under: the hold plus what they can still
   * admit besides. A budget created after admission (or a charge with no hold) does not lower the charge,
   * or a key's owner could set a 1-unit budget while their requests are in flight and pay almost nothing;
   * the charge still counts toward that budget's spend.
   */
  cap(h: BudgetHold | null, userId: number, keyId: number): number {
    if (!h) return Number.MAX_SAFE_INTEGER;
    const list = this.budgetsOf(userId, keyId);
    if (!list) return Number.MAX_SAFE_INTEGER;
    const t = this.now();
    let cap = Number.MAX_SAFE_INTEGER;
    for (const b of list) if (h.ids.includes(b.id)) cap = Math.min(cap, h.amount + Math.max(0, this.available(b, t)));
    return cap;
  }

  /** A settlement was recorded (not yet committed): its cost counts as spent until the commit. Returns the ids to unpend. */
  pend(userId: number, keyId: number, cost: number): number[] | null {
    const list = cost > 0 ? this.budgetsOf(userId, keyId) : null;
    if (!list) return null;
    for (const b of list) add(this.pending, b.id, cost);
    return list.map((b) => b.id);
  }

  unpend(ids: number[] | null, cost: number): void {
    if (ids) for (const id of ids) add(this.pending, id, -cost);
  }

  /** Whether a charge of this user and key touches budgets or alerts (no statement runs otherwise). */
  concerns(userId: number, keyId: number): boolean {
    return this.byUser.has(userId) || this.byKey.has(keyId) || this.lowBalance.has(userId);
  }

  /**
   * Runs inside the settlement transaction of `row` (cost > 0, newly inserted): adds the cost to each
   * budget's period, and writes to the outbox every threshold crossed for the first time this period and
   * a low-balance crossing (`balanceAfter + cost ≥ threshold > balanceAfter`). Rolled back with the charge.
   */
  commit(row: SettlementRow, balanceAfter: number | undefined): BudgetEffects | null {
    if (!this.concerns(row.userId, row.apiKeyId)) return null;
    const charges = this.d.charges!;
    const effects: BudgetEffects = { updates: [], events: [] };
    const count = (c: AlertCap) => charges.countAlert(c.key, c.periodKey, c.expiresAt);
    for (const b of this.budgetsOf(row.userId, row.apiKeyId) ?? []) {
      const r = charges.charge(b.id, periodKey(b.period, row.createdAt * 1000), row.cost);
      if (!r) continue;
      const { mask, alerts } = this.charged(b, r, row, effects);
      if (mask !== null) charges.markAlerted(b.id, mask);
      for (const a of alerts) if (a.caps.every((c) => count(c) <= c.max)) this.write(a, effects, (e) => charges.enqueue(e)); else this.suppressed(a);
    }
    const low = this.lowBalanceAlert(row, balanceAfter);
    if (low) if (low.caps.every((c) => count(c) <= c.max)) this.write(low, effects, (e) => charges.enqueue(e)); else this.suppressed(low);
    return effects;
  }

  /**
   * commit() on a shared database (PostgreSQL): the same writes through `charges`, bound to the
   * settlement's transaction by the caller, so they commit or roll back with the charge.
   */
  async commitWith(charges: AsyncBudgetCharges, row: SettlementRow, balanceAfter: number | undefined): Promise<BudgetEffects | null> {
    if (!this.concerns(row.userId, row.apiKeyId)) return null;
    const effects: BudgetEffects = { updates: [], events: [] };
    const within = async (a: PendingAlert) => {
      for (const c of a.caps) if (await charges.countAlert(c.key, c.periodKey, c.expiresAt) > c.max) return false;
      return true;
    };
    for (const b of this.budgetsOf(row.userId, row.apiKeyId) ?? []) {
      const r = await charges.charge(b.id, periodKey(b.period, row.createdAt * 1000), row.cost);
      if (!r) continue;
      const { mask, alerts } = this.charged(b, r, row, effects);
      if (mask !== null) await charges.markAlerted(b.id, mask);
      for (const a of alerts) if (await within(a)) await this.write(a, effects, (e) => charges.enqueue(e)); else this.suppressed(a);
    }
    const low = this.lowBalanceAlert(row, balanceAfter);
    if (low) if (await within(low)) await this.write(low, effects, (e) => charges.enqueue(e)); else this.suppressed(low);
    return effects;
  }

  /** Queues an alert that is within its caps and adds it to `effects`. */
  private write<T>(a: PendingAlert, effects: BudgetEffects, enqueue: (row: ReturnType<BudgetBook['outboxRow']>) => T): T {
    effects.events.push(a.event);
    return enqueue(this.outboxRow(a.event));
  }

  private suppressed(a: PendingAlert): void {
    this.d.log?.warn('alert.suppressed', a.suppressed);
  }

  /** What one budget charge announces: the thresholds crossed for the first time this period, each with the caps it counts against. */
  private charged(b: BudgetState, r: BudgetChargeResult, row: SettlementRow, effects: BudgetEffects): { mask: number | null; alerts: PendingAlert[] } {
    effects.updates.push({ id: b.id, periodKey: r.periodKey, spent: r.spent });
    const reached = reachedMask(r.spent, r.limitAmount);
    const fresh = reached & ~r.alerted;
    if (!fresh) return { mask: null, alerts: [] };
    // The period the charge counted in, which is later than the row's own when it committed late: the cap and
    // the alert's period_end follow it, or the cap's row would expire (and be pruned) while its period runs.
    const expiresAt = periodEndOfKey(b.period, r.periodKey);
    const caps: AlertCap[] = [{ key: `${b.scope}:${b.subjectId}:${b.period}`, periodKey: r.periodKey, expiresAt, max: MAX_THRESHOLD_ALERTS_PER_PERIOD }];
    if (b.scope === 'key') caps.push({ key: `keys-of:${row.userId}:${b.period}`, periodKey: r.periodKey, expiresAt, max: MAX_KEY_ALERTS_PER_OWNER_PER_PERIOD });
    const alerts = thresholdsOf(fresh).map((pct) => ({
      caps,
      event: this.event('budget.threshold', row.createdAt, {
        budget_id: b.id, scope: b.scope, user_id: row.userId, key_id: b.scope === 'key' ? b.subjectId : null, period: b.period,
        period_key: r.periodKey, period_end: Math.floor(expiresAt / 1000), threshold: pct, limit: r.limitAmount, spent: r.spent,
        request_id: row.requestId,
      }),
      suppressed: { budget_id: b.id, scope: b.scope, subject_id: b.subjectId, period: b.period, period_key: r.periodKey, threshold: pct,
        msg: `more than ${MAX_THRESHOLD_ALERTS_PER_PERIOD} threshold alerts for this subject, or ${MAX_KEY_ALERTS_PER_OWNER_PER_PERIOD} for this owner's keys, this period (budgets or keys set and cleared repeatedly?)` },
    }));
    return { mask: r.alerted | reached, alerts };
  }

  /** A low-balance crossing (`balanceAfter + cost ≥ threshold > balanceAfter`), with its cap. */
  private lowBalanceAlert(row: SettlementRow, balanceAfter: number | undefined): PendingAlert | null {
    const threshold = this.lowBalance.get(row.userId);
    if (threshold === undefined || balanceAfter === undefined || balanceAfter >= threshold || balanceAfter + row.cost < threshold) return null;
    // The user sets its own threshold at will: re-armed just under the balance before every cheap request, it would
    // otherwise write an alert per request. Bounded like budget thresholds, per user and UTC day.
    const atMs = row.createdAt * 1000;
    const day = periodKey('daily', atMs);
    return {
      caps: [{ key: `low:${row.userId}:daily`, periodKey: day, expiresAt: periodEnd('daily', atMs), max: MAX_THRESHOLD_ALERTS_PER_PERIOD }],
      event: this.event('balance.low', row.createdAt, { user_id: row.userId, threshold, balance: balanceAfter, request_id: row.requestId }),
      suppressed: { type: 'balance.low', user_id: row.userId, period_key: day, threshold, balance: balanceAfter,
        msg: `more than ${MAX_THRESHOLD_ALERTS_PER_PERIOD} low-balance alerts for this user today (threshold set repeatedly?)` },
    };
  }

  private event(type: AlertEvent['type'], createdAt: number, data: Record<string, unknown>): AlertEvent {
    return { id: newEventId(), type, created_at: createdAt, data };
  }

  private outboxRow(event: AlertEvent) {
    return { eventId: event.id, type: event.type, payload: JSON.stringify(event), status: this.d.deliver ? 'pending' as const : 'skipped' as const, nextAttemptAt: this.now(), createdAt: event.created_at };
  }

  /** Installs what committed charges did (in commit order) and logs their alerts. */
  applyCommitted(effects: BudgetEffects): void {
    for (const u of effects.updates) {
      const b = this.find(u.id);
      if (b) { b.periodKey = u.periodKey; b.spent = u.spent; }
    }
    for (const e of effects.events) this.d.log?.warn(`alert.${e.type}`, { event: e.id, ...flat(e.data) });
  }

  /** Spend as the request path sees it (committed this period, pending, held), for the management views. */
  usage(id: number): { spent: number; pending: number; held: number; periodKey: string; resetsAt: number } | null {
    const b = this.find(id);
    if (!b) return null;
    const t = this.now();
    const pk = periodKey(b.period, t);
    return { spent: b.periodKey === pk ? b.spent : 0, pending: this.pending.get(id) ?? 0, held: this.held.get(id) ?? 0, periodKey: pk, resetsAt: Math.floor(periodEnd(b.period, t) / 1000) };
  }

  private find(id: number): BudgetState | undefined {
    return this.byId.get(id);
  }
}

const toState = (r: BudgetRow): BudgetState => ({
  id: r.id, scope: r.scope === 'key' ? 'key' : 'user', subjectId: r.subjectId, period: r.period as BudgetPeriod, limit: r.limitAmount, periodKey: r.periodKey, spent: r.spent,
});

function exceeded(b: BudgetState, amount: number, avail: number, nowMs: number): GatewayError {
  const resets = periodEnd(b.period, nowMs);
  const who = b.scope === 'key' ? 'this API key' : 'this user';
  return new GatewayError(402, `${b.scope}_budget_exceeded`,
    `The ${b.period} budget of ${who} is used up: this request may cost up to ${amount} quota units, ${Math.max(0, avail)} of ${b.limit} left until ${new Date(resets).toISOString()}`,
    { headers: { 'retry-after': String(Math.max(1, Math.ceil((resets - nowMs) / 1000))) } });
}

function add(m: Map<number, number>, id: number, by: number): void {
  const v = (m.get(id) ?? 0) + by;
  if (v <= 0) m.delete(id);
  else m.set(id, v);
}

const flat = (d: Record<string, unknown>) => Object.fromEntries(Object.entries(d).filter(([, v]) => v !== null && v !== undefined)) as Record<string, string | number>;
