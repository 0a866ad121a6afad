/**
 * Delivers the alert outbox to the operator's webhook, off the request path: at least once, in order
 * of due time, each attempt signed, failures retried with exponential backoff until
 * ALERT_WEBHOOK_MAX_ATTEMPTS. The outbox row is written in the charge's transaction, so an alert
 * survives a crash and is sent by the next process; receivers deduplicate by the event id.
 *
 * Signature (Stripe's scheme, re-made for every attempt): `x-gateway-signature: t=<unix seconds>,v1=<hex>`
 * with hex = HMAC-SHA256(ALERT_WEBHOOK_SECRET, `${t}.${raw body}`).
 */
import { createHmac } from 'node:crypto';
import { errorText, type Logger } from '@gw/core';
import type { AlertOutboxRow, AlertOutboxStore } from '@gw/db';
import type { AlertWebhookConfig } from './webhook-config';

/** `t=<unix>,v1=<hex>` for `body` signed at `t`. */
export function signAlert(secret: string, body: string, t: number): string {
  return `t=${t},v1=${createHmac('sha256', secret).update(`${t}.${body}`).digest('hex')}`;
}

const BATCH = 32;
/** The attempt's claim outlives its deadline by this much, so a slow attempt is never sent twice at once. */
const CLAIM_MARGIN_MS = 5000;

export class AlertDispatcher {
  private timer: ReturnType<typeof setInterval> | null = null;
  private running: Promise<void> | null = null;
  private again = false;
  private closed = false;
  /** Cuts the attempt in flight at shutdown (it is retried by the next process once its claim lapses). */
  private readonly stop = new AbortController();

  constructor(private readonly repo: AlertOutboxStore, private readonly cfg: AlertWebhookConfig, private readonly log?: Logger, private readonly now: () => number = Date.now) {}

  /** Starts the periodic sweep (also picks up what a previous process left pending). */
  start(): void {
    if (!this.cfg.url || this.timer) return;
    this.timer = setInterval(() => this.poke(), this.cfg.pollMs);
    (this.timer as { unref?: () => void }).unref?.();
    this.poke();
  }

  /** Delivers what is due now, soon and never on the caller's stack (new alerts were committed). */
  poke(): void {
    if (!this.cfg.url || this.closed) return;
    if (this.running) { this.again = true; return; }
    this.running = new Promise<void>((r) => setTimeout(r, 0)).then(() => this.drain()).catch((e) => this.log?.error('alert.worker_failed', { cause: errorText(e) }))
      .finally(() => {
        this.running = null;
        if (this.again) { this.again = false; this.poke(); }
      });
  }

  /** Waits for the sweep in progress, if any (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  private async drain(): Promise<void> {
    for (;;) {
      const due = await this.repo.due(this.now(), BATCH);
      if (!due.length || this.closed) return;
      for (const row of due) {
        if (this.closed) return;
        if (!(await this.repo.claim(row.id, row.nextAttemptAt, this.now() + this.cfg.timeoutMs + CLAIM_MARGIN_MS))) continue;
        await this.attempt(row);
      }
    }
  }

  private async attempt(row: AlertOutboxRow): Promise<void> {
    const attempts = row.attempts + 1;
    let why: string;
    try {
      const t = Math.floor(this.now() / 1000);
      const res = await fetch(this.cfg.url!, {
        method: 'POST', redirect: 'manual', signal: AbortSignal.any([AbortSignal.timeout(this.cfg.timeoutMs), this.stop.signal]), body: row.payload,
        headers: {
          'content-type': 'application/json', 'user-agent': 'ai-gateway-alerts/1',
          'x-gateway-event-id': row.eventId, 'x-gateway-event-type': row.type, 'x-gateway-signature': signAlert(this.cfg.secret, row.payload, t),
        },
      });
      await res.body?.cancel().catch(() => {});
      if (res.status >= 200 && res.status < 300) {
        await this.repo.delivered(row.id, attempts, this.now());
        this.log?.info('alert.delivered', { event: row.eventId, type: row.type, attempts });
        return;
      }
      why = `HTTP ${res.status}`;
    } catch (e) {
      why = errorText(e);
    }
    if (attempts >= this.cfg.maxAttempts) {
      await this.repo.failed(row.id, attempts, why);
      this.log?.error('alert.delivery_failed', { event: row.eventId, type: row.type, attempts, cause: why, msg: 'giving up; the alert stays in the outbox as failed' });
      return;
    }
    const delay = Math.min(this.cfg.retryMaxMs, this.cfg.retryMs * 2 ** (attempts - 1));
    await this.repo.retry(row.id, attempts, this.now() + delay, why);
    this.log?.warn('alert.delivery_retry', { event: row.eventId, type: row.type, attempts, cause: why, retry_in_ms: delay });
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.stop.abort(new Error('gateway shutting down'));
    await this.idle();
  }
}
