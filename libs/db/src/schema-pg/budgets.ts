import { pgTable, text, index, uniqueIndex } from 'drizzle-orm/pg-core';
import { big, idColumn } from './columns';

/** PostgreSQL twin of ../schema/budgets.ts: same exports, property names and column names. */

export const budgets = pgTable('budgets', {
  id: idColumn(),
  scope: text('scope').notNull(),
  subjectId: big('subject_id').notNull(),
  period: text('period').notNull(),
  limitAmount: big('limit_amount').notNull(),
  periodKey: text('period_key').notNull().default(''),
  spent: big('spent').notNull().default(0),
  alerted: big('alerted').notNull().default(0),
  createdAt: big('created_at').notNull(),
  updatedAt: big('updated_at').notNull(),
}, (t) => [uniqueIndex('budgets_subject_uq').on(t.scope, t.subjectId, t.period)]);

export const lowBalanceAlerts = pgTable('low_balance_alerts', {
  id: idColumn(),
  userId: big('user_id').notNull(),
  threshold: big('threshold').notNull(),
  createdAt: big('created_at').notNull(),
  updatedAt: big('updated_at').notNull(),
}, (t) => [uniqueIndex('low_balance_alerts_user_uq').on(t.userId)]);

export const alertOutbox = pgTable('alert_outbox', {
  id: idColumn(),
  eventId: text('event_id').notNull(),
  type: text('type').notNull(),
  payload: text('payload').notNull(),
  status: text('status').notNull().default('pending'),
  attempts: big('attempts').notNull().default(0),
  nextAttemptAt: big('next_attempt_at').notNull(),
  lastError: text('last_error').notNull().default(''),
  createdAt: big('created_at').notNull(),
  deliveredAt: big('delivered_at'),
}, (t) => [uniqueIndex('alert_outbox_event_uq').on(t.eventId), index('alert_outbox_due_idx').on(t.status, t.nextAttemptAt)]);

export const alertCaps = pgTable('alert_caps', {
  id: idColumn(),
  capKey: text('cap_key').notNull(),
  periodKey: text('period_key').notNull(),
  n: big('n').notNull(),
  expiresAt: big('expires_at').notNull(),
}, (t) => [uniqueIndex('alert_caps_key_uq').on(t.capKey), index('alert_caps_expires_idx').on(t.expiresAt)]);
