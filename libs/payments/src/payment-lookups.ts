/**
 * The provider API lookups a webhook makes for a refund or dispute whose payment no order knows
 * (PaymentProvider.tradeNoOfPayment), kept from hammering the provider: deliveries of the same payment at once
 * share one request (a replayed or resent event delivered many times in parallel), and at most MAX_IN_FLIGHT
 * different payments are asked at a time per process. A delivery over that is told to retry (the caller answers the
 * retryable 409 it answers when the API cannot say), so a burst of such events costs the provider a few requests at a
 * time and its API quota, which checkouts need too, is not spent by webhooks.
 */
export const MAX_LOOKUPS_IN_FLIGHT = 8;

/** Thrown when MAX_IN_FLIGHT other payments are being asked: nothing was asked for this one. */
export class LookupsBusy extends Error {
  constructor() { super('too many payment lookups in flight'); }
}

export class PaymentLookups {
  private readonly inFlight = new Map<string, Promise<string | null>>();

  constructor(private readonly max = MAX_LOOKUPS_IN_FLIGHT) {}

  /** `ask(ref)`'s answer, shared with any delivery asking about the same `key` at the same time. */
  tradeNo(key: string, ask: () => Promise<string | null>): Promise<string | null> {
    const running = this.inFlight.get(key);
    if (running) return running;
    if (this.inFlight.size >= this.max) return Promise.reject(new LookupsBusy());
    const p = ask().finally(() => this.inFlight.delete(key));
    this.inFlight.set(key, p);
    return p;
  }
}
