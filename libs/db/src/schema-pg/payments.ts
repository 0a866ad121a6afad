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
  paymentRef: text('payment_ref').notNull().default(''),
  clawedBack: big('clawed_back').notNull().default(0),
  paidAmount: big('paid_amount').notNull().default(0),
  paidCurrency: text('paid_currency').notNull().default(''),
  createdAt: big('created_at').notNull(),
  updatedAt: big('updated_at').notNull(),
  paidAt: big('paid_at'),
}, (t) => [
  uniqueIndex('topup_orders_trade_uq').on(t.tradeNo), index('topup_orders_user_idx').on(t.userId),
  index('topup_orders_payment_ref_idx').on(t.provider, t.paymentRef), index('topup_orders_provider_ref_idx').on(t.provider, t.providerRef),
]);

export const topupReversals = pgTable('topup_reversals', {
  id: idColumn(),
  tradeNo: text('trade_no').notNull(),
  key: text('key').notNull(),
  state: text('state').notNull(),
  amount: big('amount').notNull(),
  gross: big('gross').notNull().default(0),
  asOf: big('as_of').notNull().default(0),
  since: big('since').notNull().default(0),
  eventId: text('event_id').notNull(),
  updatedAt: big('updated_at').notNull(),
}, (t) => [uniqueIndex('topup_reversals_uq').on(t.tradeNo, t.key)]);

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
