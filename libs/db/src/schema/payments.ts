import { sqliteTable, integer, text, index, uniqueIndex } from 'drizzle-orm/sqlite-core';

export const topupOrders = sqliteTable('topup_orders', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  tradeNo: text('trade_no').notNull(),
  userId: integer('user_id').notNull(),
  /** 'providerA' | 'providerB' */
  provider: text('provider').notNull(),
  /** Money in the currency's minor unit (cents). */
  amount: integer('amount').notNull(),
  currency: text('currency').notNull(),
  /** Quota units credited when paid. */
  credit: integer('credit').notNull(),
  /** 'pending' | 'paid' | 'failed' | 'expired' */
  status: text('status').notNull().default('pending'),
  providerRef: text('provider_ref').notNull().default(''),
  checkoutUrl: text('checkout_url').notNull().default(''),
  createdAt: integer('created_at').notNull(),
  updatedAt: integer('updated_at').notNull(),
  paidAt: integer('paid_at'),
}, (t) => [uniqueIndex('topup_orders_trade_uq').on(t.tradeNo), index('topup_orders_user_idx').on(t.userId)]);

/** Webhook event ids already processed: the exactly-once guard. */
export const webhookEvents = sqliteTable('webhook_events', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  provider: text('provider').notNull(),
  eventId: text('event_id').notNull(),
  type: text('type').notNull(),
  outcome: text('outcome').notNull().default(''),
  receivedAt: integer('received_at').notNull(),
}, (t) => [uniqueIndex('webhook_events_uq').on(t.provider, t.eventId)]);
