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
  /**
   * The provider's id of the payment itself, kept when the order is credited (providerA: the PaymentIntent,
   * providerB: the order), because refund and dispute events name the payment, not our trade no.
   */
  paymentRef: text('payment_ref').notNull().default(''),
  /** Quota units taken back from the user by refunds and disputes (net of reinstated disputes); never above `credit`. */
  clawedBack: integer('clawed_back').notNull().default(0),
  /**
   * What the customer paid, kept when the order is credited, when it is not `amount` in `currency`: providerB's
   * `amount_paid` with a tax charged on top (same currency), providerA's presentment amount and currency (Adaptive
   * Pricing). Refunds and disputes state this money, so their share of the payment is taken against it. 0 / '': as ordered.
   */
  paidAmount: integer('paid_amount').notNull().default(0),
  paidCurrency: text('paid_currency').notNull().default(''),
  createdAt: integer('created_at').notNull(),
  updatedAt: integer('updated_at').notNull(),
  paidAt: integer('paid_at'),
}, (t) => [
  uniqueIndex('topup_orders_trade_uq').on(t.tradeNo), index('topup_orders_user_idx').on(t.userId),
  // Refund and dispute events find their order by the payment or checkout id.
  index('topup_orders_payment_ref_idx').on(t.provider, t.paymentRef), index('topup_orders_provider_ref_idx').on(t.provider, t.providerRef),
]);

/**
 * Money taken back from a paid order, one row per reversal: `key` is 'refund:<charge id>' (providerA: the
 * charge's latest running refunded total), 'refund:<charge id>:failed:<refund id>' (providerA: one of its
 * refunds that failed), 'refund:<id>' (providerB: one refund) or 'dispute:<id>'. The rows are the
 * state that makes refund and dispute events idempotent whatever their order: an event moves a row
 * forward (a later running total, a refund failed, a new refund, a dispute withdrawn, then reinstated) or changes nothing.
 */
export const topupReversals = sqliteTable('topup_reversals', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  tradeNo: text('trade_no').notNull(),
  key: text('key').notNull(),
  /** 'refunded' | 'withdrawn' | 'reinstated' | 'failed' (a Stripe refund that failed or was canceled) */
  state: text('state').notNull(),
  /** Money (minor units) this reversal holds back now; 0 once a dispute is reinstated, and for a failed refund. */
  amount: integer('amount').notNull(),
  /** Money the provider stated: a charge's running refunded total (its latest), or a failed refund's amount. */
  gross: integer('gross').notNull().default(0),
  /** The provider's time of that statement (Stripe's event `created`); 0 when not ordered by time. */
  asOf: integer('as_of').notNull().default(0),
  /** A failed refund's creation time: it is part of the running totals stated from then until it failed. */
  since: integer('since').notNull().default(0),
  /** The event that last moved it. */
  eventId: text('event_id').notNull(),
  updatedAt: integer('updated_at').notNull(),
}, (t) => [uniqueIndex('topup_reversals_uq').on(t.tradeNo, t.key)]);

/** Webhook event ids already processed: the exactly-once guard. */
export const webhookEvents = sqliteTable('webhook_events', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  provider: text('provider').notNull(),
  eventId: text('event_id').notNull(),
  type: text('type').notNull(),
  outcome: text('outcome').notNull().default(''),
  receivedAt: integer('received_at').notNull(),
}, (t) => [uniqueIndex('webhook_events_uq').on(t.provider, t.eventId)]);

/**
 * Single-use redemption codes worth a fixed quota credit. Only the SHA-256 of a code is stored (like
 * API keys); `prefix` is its first characters, for telling codes apart in lists. A code leaves 'unused'
 * once: redeemed (with its ledger entry, kind 'redeem', ref = id) or revoked. Expiry is not a stored
 * status: an unused code past `expires_at` reads as expired.
 */
export const redemptionCodes = sqliteTable('redemption_codes', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  codeHash: text('code_hash').notNull(),
  prefix: text('prefix').notNull(),
  batch: text('batch').notNull(),
  /** Quota units credited on redemption. */
  quota: integer('quota').notNull(),
  /** 'unused' | 'redeemed' | 'revoked' */
  status: text('status').notNull().default('unused'),
  expiresAt: integer('expires_at').notNull(),
  createdBy: integer('created_by').notNull(),
  createdAt: integer('created_at').notNull(),
  redeemedBy: integer('redeemed_by'),
  redeemedAt: integer('redeemed_at'),
}, (t) => [uniqueIndex('redemption_codes_hash_uq').on(t.codeHash), index('redemption_codes_batch_idx').on(t.batch, t.id)]);
