/** Top-up orders: create one and get a hosted checkout URL from its provider; list and read them. */
import { GatewayError, localWindows, nowSeconds, randomToken, type AttemptWindow, type AttemptWindows } from '@gw/core';
import type { TopupOrderRow, TopupOrdersStore } from '@gw/db';
import type { PaymentsConfig } from './config';
import { PROVIDER_IDS, ProviderApiError, type PaymentProvider, type ProviderId } from './provider';

/** `tp_` + 24 base62 characters (~143 bits): unguessable, and unique by the table's index. */
export const newTradeNo = () => `tp_${randomToken(24)}`;

export interface TopupListQuery {
  userId?: number;
  status?: string;
  provider?: string;
  page: number;
  pageSize: number;
}

export class TopupService {
  /** Orders created per user in the last hour: each is a provider API call and a stored order. */
  private readonly created: AttemptWindow;

  constructor(
    private readonly cfg: PaymentsConfig,
    private readonly orders: TopupOrdersStore,
    private readonly providers: ReadonlyMap<ProviderId, PaymentProvider>,
    windows: AttemptWindows = localWindows,
  ) {
    this.created = windows('topup', 3_600_000);
  }

  /** The provider behind an id, or a 400 `provider_not_configured`. */
  provider(id: string): PaymentProvider {
    const p = this.providers.get(id as ProviderId);
    if (p) return p;
    if (!(PROVIDER_IDS as readonly string[]).includes(id)) {
      throw new GatewayError(400, 'invalid_provider', `provider must be one of ${PROVIDER_IDS.join(', ')}`, { param: 'provider' });
    }
    throw new GatewayError(400, 'provider_not_configured', `Payment provider ${id} is not configured on this gateway`, { param: 'provider' });
  }

  /**
   * Records a pending order, then asks the provider for a checkout. A provider failure marks the
   * order failed and answers 502; nothing is ever credited here (only a verified webhook credits).
   */
  async create(userId: number, amount: number, providerId: string): Promise<TopupOrderRow> {
    const p = this.provider(providerId);
    if (!Number.isSafeInteger(amount) || amount < this.cfg.min || amount > this.cfg.max) {
      throw new GatewayError(400, 'out_of_range', `amount must be an integer between ${this.cfg.min} and ${this.cfg.max} (minor units of ${this.cfg.currency})`, { param: 'amount' });
    }
    p.checkAmount(amount);
    // Claimed before the order exists, so parallel creations get no more. Without a limit one user could
    // spend the merchant's provider API rate limit (every user's checkouts) and fill the orders table.
    if (this.cfg.ordersPerHour > 0) {
      const wait = await this.created.hit(`u${userId}`, this.cfg.ordersPerHour);
      if (wait) throw new GatewayError(429, 'too_many_orders', `At most ${this.cfg.ordersPerHour} top-up orders an hour; try again later`, { headers: { 'retry-after': String(wait) } });
    }
    const now = nowSeconds();
    const order = await this.orders.insert({
      tradeNo: newTradeNo(), userId, provider: p.id, amount, currency: this.cfg.currency,
      credit: amount * this.cfg.quotaPerUnit, status: 'pending', createdAt: now, updatedAt: now,
    });
    let checkout;
    try {
      checkout = await p.createCheckout({
        tradeNo: order.tradeNo, userId, amount, currency: order.currency,
        successUrl: this.cfg.successUrl, cancelUrl: this.cfg.cancelUrl,
      });
    } catch (e) {
      await this.orders.closePending(order.tradeNo, 'failed', nowSeconds());
      const msg = e instanceof ProviderApiError ? e.message : `${p.id} checkout failed`;
      throw new GatewayError(502, 'provider_error', `${msg}; order ${order.tradeNo} was marked failed`, { cause: e });
    }
    const updated = await this.orders.attachCheckout(order.tradeNo, checkout.ref, checkout.url, nowSeconds());
    // Not pending any more only if a webhook closed it during the call: report what is stored.
    return updated ?? (await this.orders.byTradeNo(order.tradeNo))!;
  }

  /**
   * Closes the pending orders nothing else will close:
   * - unstarted: no checkout id within TOPUP_CHECKOUT_DEADLINE_SECONDS → failed. Their create call's process died (or
   *   its last write failed) after the order was written, and a create still running is bounded by the provider
   *   timeout, which the deadline exceeds. Nobody holds a URL to pay them at; a payment event naming one is
   *   `mismatch:checkout` (no checkout id).
   * - stale: a checkout but no outcome within TOPUP_PENDING_EXPIRY_SECONDS → expired. providerB sends no expiry
   *   event, and providerA's can be lost. A payment of the order's own checkout that comes later still credits it
   *   (closableFrom), so this closes the order for its owner's view without giving up the money.
   * - orphaned: the order's provider is no longer configured → expired once older than the checkout deadline: no event
   *   of it can arrive (its webhooks are 400 provider_not_configured). Not younger: in a rolling change of the
   *   configuration, a leader still without a provider would expire the orders other nodes just created with it. Put
   *   back, its late payment credits like a stale order's.
   */
  async sweep(now: number): Promise<{ unstarted: string[]; stale: string[]; orphaned: { tradeNo: string; provider: string }[] }> {
    const ids = [...this.providers.keys()];
    const [unstarted, stale, orphaned] = await Promise.all([
      Promise.all(ids.map((id) => this.orders.failUnstarted(id, now - this.cfg.checkoutDeadlineSeconds, now))),
      Promise.all(ids.map((id) => this.orders.expireStale(id, now - this.cfg.pendingExpirySeconds, now))),
      this.orders.expireOrphaned(ids, now - this.cfg.checkoutDeadlineSeconds, now),
    ]);
    return { unstarted: unstarted.flat(), stale: stale.flat(), orphaned };
  }

  /** One order; a user sees only their own (someone else's reads as not found). */
  async get(tradeNo: string, viewer: { userId: number; isAdmin: boolean }): Promise<TopupOrderRow> {
    const o = await this.orders.byTradeNo(tradeNo);
    if (!o || (!viewer.isAdmin && o.userId !== viewer.userId)) throw new GatewayError(404, 'order_not_found', `No top-up order ${tradeNo}`, { param: 'trade_no' });
    return o;
  }

  async list(q: TopupListQuery): Promise<{ items: TopupOrderRow[]; total: number; page: number; page_size: number }> {
    const r = await this.orders.list({ userId: q.userId, status: q.status, provider: q.provider, offset: (q.page - 1) * q.pageSize, limit: q.pageSize });
    return { ...r, page: q.page, page_size: q.pageSize };
  }
}
