import { pgTable, text, index, uniqueIndex } from 'drizzle-orm/pg-core';
import { big, idColumn } from './columns';

/** PostgreSQL twin of ../schema/payments.ts: same exports, property names and column names. */

export const topupOrders = pgTable('topup_orders', {
  id: idColumn(),
  tradeNo: text('trade_no').notNull(),
  userId: big('user_id').notNull(),
  provider: text('provider').notNull(),
  amount: big('amount').notNull(),
  currency: text('currency').notNull(),
  credit: big('credit').notNull(),
  status: text('status').notNull().default('pending'),
  providerRef: text('provider_ref').notNull().default(''),
  checkoutUrl: text('checkout_url').notNull().default(''),
  createdAt: big('created_at').notNull(),
  updatedAt: big('updated_at').notNull(),
  paidAt: big('paid_at'),
}, (t) => [uniqueIndex('topup_orders_trade_uq').on(t.tradeNo), index('topup_orders_user_idx').on(t.userId)]);

export const webhookEvents = pgTable('webhook_events', {
  id: idColumn(),
  provider: text('provider').notNull(),
  eventId: text('event_id').notNull(),
  type: text('type').notNull(),
  outcome: text('outcome').notNull().default(''),
  receivedAt: big('received_at').notNull(),
}, (t) => [uniqueIndex('webhook_events_uq').on(t.provider, t.eventId)]);
