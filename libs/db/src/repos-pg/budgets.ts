import { and, asc, count, desc, eq, inArray, lt, lte, sql, type SQL } from 'drizzle-orm';
import { MAX_COUNTER } from '@gw/core';
import type { PgDb } from '../pg/client';
import { alertCaps, alertOutbox, budgets, lowBalanceAlerts } from '../schema-pg';
import { prunable, type AlertOutboxRow, type BudgetChargeResult, type BudgetExpected, type BudgetRow, type LowBalanceRow } from '../repos/budgets';
import { alertCapSql } from '../pg/budget-charges';
import { collateC, type PgWriter } from './sql';

/** PostgreSQL twin of BudgetsRepo in ../repos/budgets.ts (same methods, async). */
export class PgBudgetsRepo {
  constructor(private readonly db: PgDb) {}

  async all(): Promise<BudgetRow[]> {
    return this.db.select().from(budgets).orderBy(asc(budgets.id));
  }

  async list(filter: { scope?: string; subjectIds?: number[] }): Promise<BudgetRow[]> {
    const where: SQL[] = [];
    if (filter.scope) where.push(eq(budgets.scope, filter.scope));
    if (filter.subjectIds) where.push(inArray(budgets.subjectId, filter.subjectIds.length ? filter.subjectIds : [-1]));
    return this.db.select().from(budgets).where(where.length ? and(...where) : undefined).orderBy(asc(budgets.id));
  }

  async byId(id: number): Promise<BudgetRow | undefined> {
    return (await this.db.select().from(budgets).where(eq(budgets.id, id)))[0];
  }

  async find(scope: string, subjectId: number, period: string): Promise<BudgetRow | undefined> {
    return (await this.db.select().from(budgets).where(and(eq(budgets.scope, scope), eq(budgets.subjectId, subjectId), eq(budgets.period, period))))[0];
  }

  async insert(row: typeof budgets.$inferInsert): Promise<BudgetRow> {
    return (await this.db.insert(budgets).values(row).returning())[0]!;
  }

  async insertIfAbsent(row: typeof budgets.$inferInsert): Promise<BudgetRow | undefined> {
    return (await this.db.insert(budgets).values(row).onConflictDoNothing({ target: [budgets.scope, budgets.subjectId, budgets.period] }).returning())[0];
  }

  async update(id: number, patch: Partial<typeof budgets.$inferInsert>): Promise<BudgetRow | undefined> {
    return (await this.db.update(budgets).set(patch).where(eq(budgets.id, id)).returning())[0];
  }

  async updateFrom(id: number, expected: BudgetExpected, patch: { limitAmount: number; alerted: number; updatedAt: number }): Promise<BudgetRow | undefined> {
    return (await this.db.update(budgets).set(patch).where(and(eq(budgets.id, id), eq(budgets.limitAmount, expected.limitAmount), eq(budgets.spent, expected.spent), eq(budgets.periodKey, expected.periodKey))).returning())[0];
  }

  async delete(id: number): Promise<BudgetRow | undefined> {
    return (await this.db.delete(budgets).where(eq(budgets.id, id)).returning())[0];
  }

  async lowBalanceAll(): Promise<LowBalanceRow[]> {
    return this.db.select().from(lowBalanceAlerts);
  }

  async lowBalance(userId: number): Promise<LowBalanceRow | undefined> {
    return (await this.db.select().from(lowBalanceAlerts).where(eq(lowBalanceAlerts.userId, userId)))[0];
  }

  async setLowBalance(userId: number, threshold: number, now: number): Promise<void> {
    await this.db.insert(lowBalanceAlerts).values({ userId, threshold, createdAt: now, updatedAt: now })
      .onConflictDoUpdate({ target: lowBalanceAlerts.userId, set: { threshold, updatedAt: now } });
  }

  async clearLowBalance(userId: number): Promise<boolean> {
    return (await this.db.delete(lowBalanceAlerts).where(eq(lowBalanceAlerts.userId, userId)).returning({ id: lowBalanceAlerts.id })).length > 0;
  }
}

/**
 * The budget writes of a settlement (PostgreSQL twin of BudgetChargesRepo): every method takes the
 * settlement's transaction, so a budget charge commits or rolls back with the usage it counts.
 */
export class PgBudgetChargesRepo {
  constructor(private readonly db: PgDb) {}

  /**
   * Adds `cost` to the budget's period `periodKey`, or to the later one it already counts (see
   * BudgetChargesRepo); null when the budget is gone. One UPDATE, so the row lock orders concurrent charges
   * and none is lost. Period keys compare bytewise (collate "C"), as SQLite's BINARY does.
   */
  async charge(budgetId: number, periodKey: string, cost: number, tx: PgWriter = this.db): Promise<BudgetChargeResult | null> {
    const sameOrLater = sql`${collateC(budgets.periodKey)} >= ${periodKey}`;
    const [r] = await tx.update(budgets).set({
      // An accumulating counter like used_quota: it stops at 2^53 − 1 (see BudgetChargesRepo).
      spent: sql`least(case when ${sameOrLater} then ${budgets.spent} + ${cost} else ${cost} end, ${sql.raw(String(MAX_COUNTER))})`,
      alerted: sql`case when ${sameOrLater} then ${budgets.alerted} else 0 end`,
      periodKey: sql`greatest(${collateC(budgets.periodKey)}, ${periodKey})`,
    }).where(eq(budgets.id, budgetId))
      .returning({ spent: budgets.spent, alerted: budgets.alerted, limitAmount: budgets.limitAmount, periodKey: budgets.periodKey });
    return r ?? null;
  }

  async markAlerted(budgetId: number, mask: number, tx: PgWriter = this.db): Promise<void> {
    await tx.update(budgets).set({ alerted: mask }).where(eq(budgets.id, budgetId));
  }

  /** Queues an alert for delivery (status 'pending', or 'skipped' when no webhook is configured). */
  async enqueue(e: { eventId: string; type: string; payload: string; status: 'pending' | 'skipped'; nextAttemptAt: number; createdAt: number }, tx: PgWriter = this.db): Promise<void> {
    await tx.insert(alertOutbox).values({
      eventId: e.eventId, type: e.type, payload: e.payload, status: e.status, attempts: 0, nextAttemptAt: e.nextAttemptAt, lastError: '', createdAt: e.createdAt,
    });
  }

  async countAlert(capKey: string, periodKey: string, expiresAt: number, tx: PgWriter = this.db): Promise<number> {
    const [r] = await tx.execute(alertCapSql(capKey, periodKey, expiresAt)) as unknown as Array<{ n: string | number }>;
    return Number(r!.n);
  }
}

/** PostgreSQL twin of AlertOutboxRepo: the outbox as the delivery worker and the management API see it. */
export class PgAlertOutboxRepo {
  constructor(private readonly db: PgDb) {}

  async due(nowMs: number, limit: number): Promise<AlertOutboxRow[]> {
    return this.db.select().from(alertOutbox).where(and(eq(alertOutbox.status, 'pending'), lte(alertOutbox.nextAttemptAt, nowMs)))
      .orderBy(asc(alertOutbox.nextAttemptAt), asc(alertOutbox.id)).limit(limit);
  }

  /** Compare-and-set on the seen next attempt: under READ COMMITTED a second claimer re-checks it after the first commits and loses. */
  async claim(id: number, seenNext: number, leaseUntil: number): Promise<boolean> {
    return (await this.db.update(alertOutbox).set({ nextAttemptAt: leaseUntil })
      .where(and(eq(alertOutbox.id, id), eq(alertOutbox.status, 'pending'), eq(alertOutbox.nextAttemptAt, seenNext))).returning({ id: alertOutbox.id })).length > 0;
  }

  async delivered(id: number, attempts: number, atMs: number): Promise<void> {
    await this.db.update(alertOutbox).set({ status: 'delivered', attempts, deliveredAt: atMs, lastError: '' }).where(eq(alertOutbox.id, id));
  }

  async retry(id: number, attempts: number, nextMs: number, error: string): Promise<void> {
    await this.db.update(alertOutbox).set({ attempts, nextAttemptAt: nextMs, lastError: error }).where(eq(alertOutbox.id, id));
  }

  async failed(id: number, attempts: number, error: string): Promise<void> {
    await this.db.update(alertOutbox).set({ status: 'failed', attempts, lastError: error }).where(eq(alertOutbox.id, id));
  }

  async list(q: { status?: string; offset: number; limit: number }): Promise<{ items: AlertOutboxRow[]; total: number }> {
    const where = q.status ? eq(alertOutbox.status, q.status) : undefined;
    const [items, [t]] = await Promise.all([
      this.db.select().from(alertOutbox).where(where).orderBy(desc(alertOutbox.id)).limit(q.limit).offset(q.offset),
      this.db.select({ n: count() }).from(alertOutbox).where(where),
    ]);
    return { items, total: t?.n ?? 0 };
  }

  async prune(beforeMs: number, nowMs: number, limit: number): Promise<number> {
    // SKIP LOCKED: a settlement refreshing an expired cap row holds it (and may hold the next one it refreshes), so
    // a DELETE locking rows in its own scan order could deadlock with it; a row in use is left to the next pass.
    const capIds = this.db.select({ id: alertCaps.id }).from(alertCaps).where(lt(alertCaps.expiresAt, nowMs)).limit(limit).for('update', { skipLocked: true });
    const caps = (await this.db.delete(alertCaps).where(inArray(alertCaps.id, capIds)).returning({ id: alertCaps.id })).length;
    const ids = this.db.select({ id: alertOutbox.id }).from(alertOutbox).where(prunable(beforeMs, alertOutbox)).limit(limit);
    return caps + (await this.db.delete(alertOutbox).where(inArray(alertOutbox.id, ids)).returning({ id: alertOutbox.id })).length;
  }
}
