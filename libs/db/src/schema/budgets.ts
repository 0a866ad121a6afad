import { sqliteTable, integer, text, index, uniqueIndex } from 'drizzle-orm/sqlite-core';

/**
 * Periodic spending budgets of a user or a key, on top of the prepaid balance. `spent` counts the
 * committed charges of the period named by `period_key` (UTC `YYYY-MM-DD` or `YYYY-MM`); a charge
 * in a later period starts `spent` again from its own cost, so periods reset without a job touching
 * rows. `alerted` is the bitmask of the thresholds (50/80/100 %) already announced in that period.
 */
export const budgets = sqliteTable('budgets', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  /** 'user' | 'key' */
  scope: text('scope').notNull(),
  /** The user's or the key's id. */
  subjectId: integer('subject_id').notNull(),
  /** 'daily' | 'monthly' */
  period: text('period').notNull(),
  /** Most quota units the subject may spend per period. */
  limitAmount: integer('limit_amount').notNull(),
  periodKey: text('period_key').notNull().default(''),
  spent: integer('spent').notNull().default(0),
  alerted: integer('alerted').notNull().default(0),
  createdAt: integer('created_at').notNull(),
  updatedAt: integer('updated_at').notNull(),
}, (t) => [uniqueIndex('budgets_subject_uq').on(t.scope, t.subjectId, t.period)]);

/** A user's low-balance alert: announced when a charge takes the balance from ≥ threshold to below it. */
export const lowBalanceAlerts = sqliteTable('low_balance_alerts', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  userId: integer('user_id').notNull(),
  threshold: integer('threshold').notNull(),
  createdAt: integer('created_at').notNull(),
  updatedAt: integer('updated_at').notNull(),
}, (t) => [uniqueIndex('low_balance_alerts_user_uq').on(t.userId)]);

/**
 * Alerts to deliver to the operator's webhook, written in the transaction of the charge that caused
 * them (a crash cannot lose one) and delivered at least once by a background worker.
 */
export const alertOutbox = sqliteTable('alert_outbox', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  /** The receiver's deduplication key (`evt_…`), also sent as a header. */
  eventId: text('event_id').notNull(),
  /** 'budget.threshold' | 'balance.low' */
  type: text('type').notNull(),
  /** The exact JSON body delivered (and signed). */
  payload: text('payload').notNull(),
  /** 'pending' | 'delivered' | 'failed' (retries exhausted) | 'skipped' (no webhook configured) */
  status: text('status').notNull().default('pending'),
  attempts: integer('attempts').notNull().default(0),
  /** Unix ms of the next delivery attempt (also the claim of the worker that took it). */
  nextAttemptAt: integer('next_attempt_at').notNull(),
  lastError: text('last_error').notNull().default(''),
  createdAt: integer('created_at').notNull(),
  deliveredAt: integer('delivered_at'),
}, (t) => [uniqueIndex('alert_outbox_event_uq').on(t.eventId), index('alert_outbox_due_idx').on(t.status, t.nextAttemptAt)]);

/**
 * How many alerts one cap (`cap_key`: a budget subject, an owner's keys, a user's low-balance alerts, per period
 * kind) has written in its current period `period_key`. Counted in the charge's transaction, in the database, so
 * the caps hold across nodes and restarts, and apart from the outbox, whose delivered rows are pruned. A row of a
 * past period (`expires_at`, Unix ms, its end) counts nothing and is pruned with the outbox.
 */
export const alertCaps = sqliteTable('alert_caps', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  capKey: text('cap_key').notNull(),
  periodKey: text('period_key').notNull(),
  n: integer('n').notNull(),
  expiresAt: integer('expires_at').notNull(),
}, (t) => [uniqueIndex('alert_caps_key_uq').on(t.capKey), index('alert_caps_expires_idx').on(t.expiresAt)]);
