/**
 * The provider API lookups a webhook makes for a refund or dispute whose payment no order knows
 * (PaymentProvider.tradeNoOfPayment), kept from hammering the provider: deliveries of the same payment at once
 * share one request (a replayed or resent event delivered many times in parallel), and at most MAX_IN_FLIGHT
 * different payments are asked at a time per process. A delivery over that is told to retry (the caller answers the
 * retryable 409 it answers when the API cannot say), so a burst of such events costs the provider a few requests at a
 * time and its API quota, which checkouts need too, is not spent by webhooks.
 *
 * An answer is also kept for a short while after it came: a delivery that arrives just after the shared request
 * ended, while the first delivery is still recording its event, would otherwise ask again. A payment's order never
 * changes (the trade no is set at checkout), so a kept answer cannot be stale; failures are not kept.
 */
export const MAX_LOOKUPS_IN_FLIGHT = 8;
export const LOOKUP_ANSWER_KEPT_MS = 10_000;
const MAX_KEPT_ANSWERS = 1024;

/** Thrown when MAX_IN_FLIGHT other payments are being asked: nothing was asked for this one. */
export class LookupsBusy extends Error {
  constructor() { super('too many payment lookups in flight'); }
}

export class PaymentLookups {
  private readonly inFlight = new Map<string, Promise<string | null>>();
  // Insertion order is answer order, so the oldest answer is the first key.
  private readonly answers = new Map<string, { tradeNo: string | null; until: number }>();

  constructor(private readonly max = MAX_LOOKUPS_IN_FLIGHT, private readonly keptMs = LOOKUP_ANSWER_KEPT_MS, private readonly now = Date.now) {}

  /** `ask(ref)`'s answer, shared with any delivery asking about the same `key` at the same time or shortly after. */
  tradeNo(key: string, ask: () => Promise<string | null>): Promise<string | null> {
    const kept = this.answers.get(key);
    if (kept) {
      if (kept.until > this.now()) return Promise.resolve(kept.tradeNo);
      this.answers.delete(key);
    }
    const running = this.inFlight.get(key);
    if (running) return running;
    if (this.inFlight.size >= this.max) return Promise.reject(new LookupsBusy());
    const p = ask().then((tradeNo) => { this.keep(key, tradeNo); return tradeNo; }).finally(() => this.inFlight.delete(key));
    this.inFlight.set(key, p);
    return p;
  }

  private keep(key: string, tradeNo: string | null): void {
    this.answers.delete(key);
    if (this.answers.size >= MAX_KEPT_ANSWERS) this.answers.delete(this.answers.keys().next().value!);
    this.answers.set(key, { tradeNo, until: this.now() + this.keptMs });
  }
}
