/**
 * Removes alerts done with from the outbox: delivered ones ALERT_OUTBOX_RETENTION_DAYS after their delivery,
 * skipped ones (no webhook configured) as long after they were written (0: never), and the caps of ended periods. Pending and failed alerts stay, as do the
 * alert caps of the current periods (a table of their own, so pruning never lets a flood through again). Runs on
 * the leader only (one node of a cluster), every ALERT_OUTBOX_PRUNE_MS, in bounded batches so a large backlog
 * never holds a long transaction.
 */
import { errorText, everyWhileLeader, type Leader, type Logger } from '@gw/core';
import type { AlertOutboxStore } from '@gw/db';

const BATCH = 5000;

export interface OutboxRetentionConfig {
  /** Days a delivered or skipped alert is kept; 0 keeps them forever. */
  retentionDays: number;
  pruneMs: number;
}

export class OutboxRetention {
  private stopFollowing: (() => Promise<void>) | null = null;

  constructor(private readonly repo: AlertOutboxStore, private readonly cfg: OutboxRetentionConfig, private readonly log?: Logger, private readonly now: () => number = Date.now) {}

  /** Prunes now and then periodically while `leader` leads (ended periods' caps also when alerts are kept forever). */
  follow(leader: Leader): void {
    this.stopFollowing = everyWhileLeader(leader, this.cfg.pruneMs, (signal) => this.prune(signal), {
      atOnce: true, onError: (e) => this.log?.error('alert.prune_failed', { cause: errorText(e) }),
    });
  }

  /** One pass: batches until the backlog is gone, or until `signal` says leadership was lost (or the pass stopped). */
  async prune(signal?: AbortSignal): Promise<number> {
    const now = this.now();
    // Retention 0 keeps every alert: nothing was delivered or written before the epoch.
    const before = this.cfg.retentionDays > 0 ? now - this.cfg.retentionDays * 86_400_000 : 0;
    let total = 0;
    for (let n = BATCH; n >= BATCH && !signal?.aborted; total += n) {
      // SQLite's prune is synchronous: without a turn between batches a large backlog (the first pass after an
      // upgrade) would hold the event loop, and every request, for the whole deletion.
      if (total) await new Promise((r) => setImmediate(r));
      if (signal?.aborted) break;
      n = await this.repo.prune(before, now, BATCH);
    }
    if (total) this.log?.info('alert.pruned', { rows: total, before: new Date(before).toISOString() });
    return total;
  }

  /** Stops following; resolves once a running pass has ended. */
  async close(): Promise<void> {
    await this.stopFollowing?.();
  }
}
