import { sql, type SQL } from 'drizzle-orm';
import { MAX_COUNTER } from '@gw/core';
import { ALERT_CAP_SQL, type AsyncBudgetCharges, type BudgetChargeResult } from '../repos/budgets';
import type { PgExecutor } from './prepared';

const COUNTER_CAP = sql.raw(String(MAX_COUNTER));

/**
 * The budget writes of a settlement on PostgreSQL, bound to the settlement's transaction (`tx`), so a
 * budget's spend and the alerts it queues commit or roll back with the charge. The same statements as
 * SQLite's BudgetChargesRepo; period keys compare bytewise (collate "C"), as SQLite's BINARY does.
 */
export function pgBudgetCharges(tx: PgExecutor): AsyncBudgetCharges {
  return {
    async charge(budgetId, periodKey, cost) {
      // One UPDATE: a new period restarts the spend and the alerts; a charge committing after the budget already
      // counts a later period counts in that one (see BudgetChargesRepo). The spend stops at 2^53 − 1 like used_quota.
      const [r] = await tx.execute<{ spent: string; alerted: number; limit_amount: string; period_key: string }>(sql`
        UPDATE budgets SET spent = least(CASE WHEN period_key COLLATE "C" >= ${periodKey} THEN spent + ${cost} ELSE ${cost} END, ${COUNTER_CAP}),
          alerted = CASE WHEN period_key COLLATE "C" >= ${periodKey} THEN alerted ELSE 0 END,
          period_key = greatest(period_key COLLATE "C", ${periodKey})
        WHERE id = ${budgetId}
        RETURNING spent, alerted, limit_amount, period_key`);
      return r ? { spent: Number(r.spent), alerted: Number(r.alerted), limitAmount: Number(r.limit_amount), periodKey: r.period_key } satisfies BudgetChargeResult : null;
    },
    async markAlerted(budgetId, mask) {
      await tx.execute(sql`UPDATE budgets SET alerted = ${mask} WHERE id = ${budgetId}`);
    },
    async enqueue(e) {
      await tx.execute(sql`INSERT INTO alert_outbox (event_id, type, payload, status, attempts, next_attempt_at, last_error, created_at)
        VALUES (${e.eventId}, ${e.type}, ${e.payload}, ${e.status}, 0, ${e.nextAttemptAt}, '', ${e.createdAt})`);
    },
    async countAlert(capKey, periodKey, expiresAt) {
      const [r] = await tx.execute<{ n: string }>(alertCapSql(capKey, periodKey, expiresAt));
      return Number(r!.n);
    },
  };
}

/** ALERT_CAP_SQL with its $1..$3 bound. */
export function alertCapSql(capKey: string, periodKey: string, expiresAt: number): SQL {
  const args = [capKey, periodKey, expiresAt];
  const parts = ALERT_CAP_SQL.split(/\$(\d)/);
  return sql.join(parts.map((p, i) => (i % 2 ? sql`${args[Number(p) - 1]}` : sql.raw(p))));
}

/** Locks the budgets a batch charges, in id order, so two nodes' batches cannot deadlock on them. */
export async function lockBudgets(tx: PgExecutor, ids: number[]): Promise<void> {
  if (!ids.length) return;
  await tx.execute(sql`SELECT 1 FROM budgets WHERE id IN (SELECT unnest(${`{${[...new Set(ids)].sort((a, b) => a - b).join(',')}}`}::bigint[])) ORDER BY id FOR UPDATE`);
}

/** Budgets' committed spend; a budget that is gone is left out. */
export async function budgetSpend(tx: PgExecutor, ids: number[]): Promise<Array<{ id: number; periodKey: string; spent: number }>> {
  if (!ids.length) return [];
  const rows = await tx.execute<{ id: string; period_key: string; spent: string }>(sql`
    SELECT id, period_key, spent FROM budgets WHERE id IN (SELECT unnest(${`{${ids.map((i) => Math.trunc(i)).join(',')}}`}::bigint[]))`);
  return rows.map((r) => ({ id: Number(r.id), periodKey: r.period_key, spent: Number(r.spent) }));
}
