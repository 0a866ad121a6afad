import { and, asc, desc, eq, inArray, lt, lte, sql, type SQL, type SQLWrapper } from 'drizzle-orm';
import type { Database, Statement } from 'bun:sqlite';
import { MAX_COUNTER } from '@gw/core';
import type { Db } from '../client';
import { alertCaps, alertOutbox, budgets, lowBalanceAlerts } from '../schema';

export type BudgetRow = typeof budgets.$inferSelect;
/** What updateFrom compares before it writes. */
export type BudgetExpected = Pick<BudgetRow, 'limitAmount' | 'spent' | 'periodKey'>;
export type LowBalanceRow = typeof lowBalanceAlerts.$inferSelect;
export type AlertOutboxRow = typeof alertOutbox.$inferSelect;
export type NewAlertOutboxRow = typeof alertOutbox.$inferInsert;

type Awaitable<T> = T | Promise<T>;

/** A budget as created (both databases take it). */
export interface NewBudget { scope: string; subjectId: number; period: string; limitAmount: number; createdAt: number; updatedAt: number }

/**
 * Budgets and thresholds as the management service and the budget book use them: SQLite's repo answers
 * at once, PostgreSQL's (PgBudgetsRepo) with promises; callers await either.
 */
export interface BudgetsStore {
  all(): Awaitable<BudgetRow[]>;
  list(filter: { scope?: string; subjectIds?: number[] }): Awaitable<BudgetRow[]>;
  byId(id: number): Awaitable<BudgetRow | undefined>;
  find(scope: string, subjectId: number, period: string): Awaitable<BudgetRow | undefined>;
  insert(row: NewBudget): Awaitable<BudgetRow>;
  /** insert(), or undefined when the subject already has a budget of that period (a concurrent set, on any node, made it). */
  insertIfAbsent(row: NewBudget): Awaitable<BudgetRow | undefined>;
  update(id: number, patch: { limitAmount: number; alerted: number; updatedAt: number }): Awaitable<BudgetRow | undefined>;
  /**
   * update() only while the row's limit and spend are still `expected` (undefined otherwise): a compare-and-set, so a
   * caller comparing the new limit with the old one compares with the limit its write replaced, and the thresholds it
   * marks as announced were computed from the spend it overwrites (a charge committed since may have marked one).
   */
  updateFrom(id: number, expected: BudgetExpected, patch: { limitAmount: number; alerted: number; updatedAt: number }): Awaitable<BudgetRow | undefined>;
  delete(id: number): Awaitable<BudgetRow | undefined>;
  lowBalanceAll(): Awaitable<LowBalanceRow[]>;
  lowBalance(userId: number): Awaitable<LowBalanceRow | undefined>;
  setLowBalance(userId: number, threshold: number, now: number): Awaitable<void>;
  clearLowBalance(userId: number): Awaitable<boolean>;
}

/** The alert outbox as the delivery worker and the management API use it (either database). */
export interface AlertOutboxStore {
  due(nowMs: number, limit: number): Awaitable<AlertOutboxRow[]>;
  claim(id: number, seenNext: number, leaseUntil: number): Awaitable<boolean>;
  delivered(id: number, attempts: number, atMs: number): Awaitable<void>;
  retry(id: number, attempts: number, nextMs: number, error: string): Awaitable<void>;
  failed(id: number, attempts: number, error: string): Awaitable<void>;
  list(q: { status?: string; offset: number; limit: number }): Awaitable<{ items: AlertOutboxRow[]; total: number }>;
  /**
   * Deletes up to `limit` delivered alerts delivered before `beforeMs` and skipped ones created before it (pending and
   * failed ones stay), and the alert caps of periods ended before `nowMs`; returns the outbox rows deleted.
   */
  prune(beforeMs: number, nowMs: number, limit: number): Awaitable<number>;
}

/** Storage of budgets and low-balance thresholds (management side); knows SQL, no rules. */
export class BudgetsRepo {
  constructor(private readonly db: Db) {}

  all(): BudgetRow[] {
    return this.db.select().from(budgets).orderBy(asc(budgets.id)).all();
  }

  list(filter: { scope?: string; subjectIds?: number[] }): BudgetRow[] {
    const where: SQL[] = [];
    if (filter.scope) where.push(eq(budgets.scope, filter.scope));
    if (filter.subjectIds) where.push(inArray(budgets.subjectId, filter.subjectIds.length ? filter.subjectIds : [-1]));
    return this.db.select().from(budgets).where(where.length ? and(...where) : undefined).orderBy(asc(budgets.id)).all();
  }

  byId(id: number): BudgetRow | undefined {
    return this.db.select().from(budgets).where(eq(budgets.id, id)).get();
  }

  find(scope: string, subjectId: number, period: string): BudgetRow | undefined {
    return this.db.select().from(budgets).where(and(eq(budgets.scope, scope), eq(budgets.subjectId, subjectId), eq(budgets.period, period))).get();
  }

  insert(row: typeof budgets.$inferInsert): BudgetRow {
    return this.db.insert(budgets).values(row).returning().get();
  }

  insertIfAbsent(row: typeof budgets.$inferInsert): BudgetRow | undefined {
    return this.db.insert(budgets).values(row).onConflictDoNothing({ target: [budgets.scope, budgets.subjectId, budgets.period] }).returning().get();
  }

  update(id: number, patch: Partial<typeof budgets.$inferInsert>): BudgetRow | undefined {
    return this.db.update(budgets).set(patch).where(eq(budgets.id, id)).returning().get();
  }

  updateFrom(id: number, expected: BudgetExpected, patch: { limitAmount: number; alerted: number; updatedAt: number }): BudgetRow | undefined {
    return this.db.update(budgets).set(patch).where(and(eq(budgets.id, id), eq(budgets.limitAmount, expected.limitAmount), eq(budgets.spent, expected.spent), eq(budgets.periodKey, expected.periodKey))).returning().get();
  }

  delete(id: number): BudgetRow | undefined {
    return this.db.delete(budgets).where(eq(budgets.id, id)).returning().get();
  }

  lowBalanceAll(): LowBalanceRow[] {
    return this.db.select().from(lowBalanceAlerts).all();
  }

  lowBalance(userId: number): LowBalanceRow | undefined {
    return this.db.select().from(lowBalanceAlerts).where(eq(lowBalanceAlerts.userId, userId)).get();
  }

  setLowBalance(userId: number, threshold: number, now: number): void {
    this.db.insert(lowBalanceAlerts).values({ userId, threshold, createdAt: now, updatedAt: now })
      .onConflictDoUpdate({ target: lowBalanceAlerts.userId, set: { threshold, updatedAt: now } }).run();
  }

  clearLowBalance(userId: number): boolean {
    return this.db.delete(lowBalanceAlerts).where(eq(lowBalanceAlerts.userId, userId)).returning().all().length > 0;
  }
}

/** What a charge did to one budget, read back in the charge's transaction. */
export interface BudgetChargeResult { spent: number; alerted: number; limitAmount: number; periodKey: string }

/** The outbox row an alert is queued as. */
export interface AlertOutboxEntry { eventId: string; type: string; payload: string; status: 'pending' | 'skipped'; nextAttemptAt: number; createdAt: number }

/** BudgetChargesRepo's writes bound to one open transaction of a shared database (PostgreSQL). */
export interface AsyncBudgetCharges {
  charge(budgetId: number, periodKey: string, cost: number): Promise<BudgetChargeResult | null>;
  markAlerted(budgetId: number, mask: number): Promise<void>;
  enqueue(e: AlertOutboxEntry): Promise<void>;
  countAlert(capKey: string, periodKey: string, expiresAt: number): Promise<number>;
}

/**
 * The budget writes of a settlement, on raw prepared statements like SettlementsRepo (they run in
 * its batch transaction, for charges of budgeted users and keys only); the caller owns the transaction.
 */
export class BudgetChargesRepo {
  private readonly chargeStmt: Statement;
  private readonly alertedStmt: Statement;
  private readonly outboxStmt: Statement;
  private readonly capStmt: Statement;

  constructor(sqlite: Database) {
    // A charge of a later period restarts the count (and the announced thresholds) from its own cost. A charge
    // committing after the budget already counts a later period (another node's clock is ahead, a later request's
    // commit overtook it, a journal replayed after midnight) counts in that later period: the earlier one's spend is
    // already gone, so skipping it would count it in none, and the current period is never reset backwards.
    // `spent` is an accumulating counter like used_quota: it stops at 2^53 − 1 instead of growing into values readers round.
    this.chargeStmt = sqlite.prepare(`UPDATE budgets SET
      spent = min(CASE WHEN period_key >= ?2 THEN spent + ?3 ELSE ?3 END, ${MAX_COUNTER}),
      alerted = CASE WHEN period_key >= ?2 THEN alerted ELSE 0 END,
      period_key = max(period_key, ?2)
      WHERE id = ?1 RETURNING spent, alerted, limit_amount AS limitAmount, period_key AS periodKey`);
    this.alertedStmt = sqlite.prepare('UPDATE budgets SET alerted = ?2 WHERE id = ?1');
    this.outboxStmt = sqlite.prepare(`INSERT INTO alert_outbox (event_id, type, payload, status, attempts, next_attempt_at, last_error, created_at)
      VALUES (?, ?, ?, ?, 0, ?, '', ?)`);
    this.capStmt = sqlite.prepare(ALERT_CAP_SQL.replaceAll('$1', '?1').replaceAll('$2', '?2').replaceAll('$3', '?3').replaceAll('greatest', 'max'));
  }

  /** Adds `cost` to the budget's period `periodKey`, or to the later one it already counts; null when the budget is gone. */
  charge(budgetId: number, periodKey: string, cost: number): BudgetChargeResult | null {
    return (this.chargeStmt.get(budgetId, periodKey, cost) as BudgetChargeResult | null) ?? null;
  }

  markAlerted(budgetId: number, mask: number): void {
    this.alertedStmt.run(budgetId, mask);
  }

  /** Queues an alert for delivery (status 'pending', or 'skipped' when no webhook is configured). */
  enqueue(e: { eventId: string; type: string; payload: string; status: 'pending' | 'skipped'; nextAttemptAt: number; createdAt: number }): void {
    this.outboxStmt.run(e.eventId, e.type, e.payload, e.status, e.nextAttemptAt, e.createdAt);
  }

  /** Counts one alert of `capKey` in `periodKey` (ending at `expiresAt`, Unix ms); returns its count this period, this one included. */
  countAlert(capKey: string, periodKey: string, expiresAt: number): number {
    return (this.capStmt.get(capKey, periodKey, expiresAt) as { n: number }).n;
  }
}

/**
 * One alert counted against a cap, in the charge's transaction: a new period starts the count again; an alert of an
 * earlier period committing late counts in the later one, as its charge does. Both databases run it ($n placeholders;
 * SQLite's scalar max for greatest). Period keys compare bytewise.
 */
export const ALERT_CAP_SQL = `INSERT INTO alert_caps (cap_key, period_key, n, expires_at) VALUES ($1, $2, 1, $3)
  ON CONFLICT (cap_key) DO UPDATE SET
    n = CASE WHEN alert_caps.period_key >= excluded.period_key THEN alert_caps.n + 1 ELSE 1 END,
    period_key = greatest(alert_caps.period_key, excluded.period_key),
    expires_at = greatest(alert_caps.expires_at, excluded.expires_at)
  RETURNING n`;

/** The alert outbox as the delivery worker and the management API see it. */
export class AlertOutboxRepo {
  constructor(private readonly db: Db) {}

  /** Pending alerts due at `nowMs`, oldest first. */
  due(nowMs: number, limit: number): AlertOutboxRow[] {
    return this.db.select().from(alertOutbox).where(and(eq(alertOutbox.status, 'pending'), lte(alertOutbox.nextAttemptAt, nowMs)))
      .orderBy(asc(alertOutbox.nextAttemptAt), asc(alertOutbox.id)).limit(limit).all();
  }

  /**
   * Takes a due alert for one attempt by moving its next attempt to `leaseUntil`, only if nobody else
   * did since it was read (compare-and-set), so two workers never send the same attempt.
   */
  claim(id: number, seenNext: number, leaseUntil: number): boolean {
    return this.db.update(alertOutbox).set({ nextAttemptAt: leaseUntil })
      .where(and(eq(alertOutbox.id, id), eq(alertOutbox.status, 'pending'), eq(alertOutbox.nextAttemptAt, seenNext))).returning({ id: alertOutbox.id }).all().length > 0;
  }

  delivered(id: number, attempts: number, atMs: number): void {
    this.db.update(alertOutbox).set({ status: 'delivered', attempts, deliveredAt: atMs, lastError: '' }).where(eq(alertOutbox.id, id)).run();
  }

  retry(id: number, attempts: number, nextMs: number, error: string): void {
    this.db.update(alertOutbox).set({ attempts, nextAttemptAt: nextMs, lastError: error }).where(eq(alertOutbox.id, id)).run();
  }

  failed(id: number, attempts: number, error: string): void {
    this.db.update(alertOutbox).set({ status: 'failed', attempts, lastError: error }).where(eq(alertOutbox.id, id)).run();
  }

  list(q: { status?: string; offset: number; limit: number }): { items: AlertOutboxRow[]; total: number } {
    const where = q.status ? eq(alertOutbox.status, q.status) : undefined;
    const items = this.db.select().from(alertOutbox).where(where).orderBy(desc(alertOutbox.id)).limit(q.limit).offset(q.offset).all();
    const total = this.db.select({ n: sql<number>`count(*)`.mapWith(Number) }).from(alertOutbox).where(where).get()?.n ?? 0;
    return { items, total };
  }

  prune(beforeMs: number, nowMs: number, limit: number): number {
    const capIds = this.db.select({ id: alertCaps.id }).from(alertCaps).where(lt(alertCaps.expiresAt, nowMs)).limit(limit);
    const caps = this.db.delete(alertCaps).where(inArray(alertCaps.id, capIds)).returning({ id: alertCaps.id }).all().length;
    const ids = this.db.select({ id: alertOutbox.id }).from(alertOutbox).where(prunable(beforeMs)).limit(limit);
    return caps + this.db.delete(alertOutbox).where(inArray(alertOutbox.id, ids)).returning({ id: alertOutbox.id }).all().length;
  }
}

/** Outbox rows done with before `beforeMs` (Unix ms; created_at is in seconds). */
export function prunable(beforeMs: number, t: { status: SQLWrapper; deliveredAt: SQLWrapper; createdAt: SQLWrapper } = alertOutbox): SQL {
  return sql`(${t.status} = 'delivered' and ${t.deliveredAt} < ${beforeMs}) or (${t.status} = 'skipped' and ${t.createdAt} < ${Math.floor(beforeMs / 1000)})`;
}
