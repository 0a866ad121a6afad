import { errorText, type Logger } from '@gw/core';
import type { Hold, HoldStore, Mirror } from './port';

/** What the reconciler asks the ledger (PostgreSQL): was a request settled, and what are the balances now. */
export interface LedgerTruth {
  settled(requestId: string): Promise<boolean>;
  mirrors(userId: number, keyId: number | null): Promise<{ user: Mirror | null; key: Mirror | null }>;
}

/**
 * Releases holds whose node stopped renewing them (it died, or lost Redis long enough): run by the
 * leader only. A lapsed hold sits in limbo, still counted, so nothing is overspent meanwhile. Its
 * node either committed the charge before dying (the ledger has the request id) or never will (its
 * process is gone, and a settlement is only written by the process that served the request): either
 * way the hold is released with the ledger's balances as they are now, which include that charge if
 * it happened. A dead node's unfinished request is not billed (nothing recorded what it delivered).
 */
export class HoldReconciler {
  private timer: ReturnType<typeof setInterval> | null = null;
  private running: Promise<number> | null = null;

  constructor(private readonly store: HoldStore, private readonly ledger: LedgerTruth, private readonly opts: { intervalMs: number; log?: Logger }) {}

  /** One pass: every hold in limbo released against the ledger. Returns how many were released. */
  async runOnce(): Promise<number> {
    // Passes never overlap (a slow database must not stack them).
    this.running ??= this.pass().finally(() => { this.running = null; });
    return this.running;
  }

  private async pass(): Promise<number> {
    let limbo: Hold[];
    try {
      limbo = await this.store.expired();
    } catch (err) {
      this.opts.log?.warn('hold.reconcile_failed', { cause: errorText(err) });
      return 0;
    }
    let released = 0;
    for (const hold of limbo) {
      try {
        const charged = await this.ledger.settled(hold.ref);
        const m = await this.ledger.mirrors(hold.userId, hold.keyId);
        await this.store.release(hold, { user: m.user ?? undefined, key: m.key ?? undefined });
        released++;
        this.opts.log?.info('hold.reconciled', { id: hold.ref, userId: hold.userId, keyId: hold.keyId ?? '', amount: hold.amount, outcome: charged ? 'charged' : 'not_charged' });
      } catch (err) {
        // Stays in limbo (still counted) until the next pass.
        this.opts.log?.warn('hold.reconcile_failed', { id: hold.ref, cause: errorText(err) });
      }
    }
    return released;
  }

  start(): void {
    this.timer ??= setInterval(() => void this.runOnce(), this.opts.intervalMs);
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}
