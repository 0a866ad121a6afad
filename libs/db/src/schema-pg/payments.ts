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

export const redemptionCodes = pgTable('redemption_codes', {
  id: idColumn(),
  codeHash: text('code_hash').notNull(),
  prefix: text('prefix').notNull(),
  batch: text('batch').notNull(),
  quota: big('quota').notNull(),
  status: text('status').notNull().default('unused'),
  expiresAt: big('expires_at').notNull(),
  createdBy: big('created_by').notNull(),
  createdAt: big('created_at').notNull(),
  redeemedBy: big('redeemed_by'),
  redeemedAt: big('redeemed_at'),
}, (t) => [uniqueIndex('redemption_codes_hash_uq').on(t.codeHash), index('redemption_codes_batch_idx').on(t.batch, t.id)]);
