import type { ChangeBus } from './events';
import type { Logger } from './log';
import { RepairBackoff } from './repair-backoff';
/**
 * Cross-process cache invalidation. Caches listen on the local `ChangeBus`; a change feed brings
 * the changes other processes committed onto that bus, and says when some may have been missed.
 */
export type ResyncReason = 'listen' | 'periodic';

export interface ChangeFeed {
  /** True while changes from other processes are being received. */
  readonly listening: boolean;
  /** Stops listening; no event and no resync after it resolves. */
  close(): Promise<void>;
}

/**
 * One process over one database: every write already emits on the local bus as it commits, so there is
 * nothing to receive and nothing is ever missed. What can go wrong is a cache failing to apply a committed
 * write of this process (its listener threw): the write answers success (ChangeBus.committed), and that cache
 * still holds the row from before, so every cache is reloaded in full after 0.25 s, the wait doubling up to
 * `maxRetryMs` while failures keep coming (RepairBackoff), and tried again the same way until a reload works.
 * Failures during the wait are folded into the reload due.
 */
export class LocalChangeFeed implements ChangeFeed {
  readonly listening = true;
  private closed = false;
  private running = false;
  private again = false;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private readonly backoff: RepairBackoff;
  private readonly off: () => void;
  /** A failure was logged since the last reload began; how many more came since (not logged). */
  private logged = false;
  private folded = 0;

  constructor(private readonly o: { bus: ChangeBus; onResync(reason: ResyncReason): void | Promise<void>; log?: Logger; maxRetryMs?: number }) {
    this.backoff = new RepairBackoff(o.maxRetryMs ?? 30_000);
    this.off = o.bus.onRefreshFailed((event, err) => {
      if (this.closed) return;
      this.due();
      // One line per reload, not per failure (one per settled request while a key's re-read keeps failing):
      // `folded` says how many failed since the last line.
      if (this.logged) {
        this.folded++;
        return;
      }
      o.log?.error('change.refresh_failed', { event, folded: this.folded, msg: 'the write is committed; every cache is reloaded' }, err);
      this.logged = true;
      this.folded = 0;
    });
  }

  /** A repair is needed: one is scheduled unless one already is; one running now is followed by another. */
  private due(): void {
    if (this.timer) return;
    if (this.running) this.again = true;
    else this.schedule();
  }

  private schedule(): void {
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.resync();
    }, this.backoff.next());
    (this.timer as { unref?: () => void }).unref?.();
  }

  private async resync(): Promise<void> {
    if (this.closed) return;
    this.running = true;
    this.again = false;
    this.logged = false;
    let ok = false;
    try {
      await this.o.onResync('listen');
      ok = true;
    } catch (err) {
      this.o.log?.error('change_feed.resync_failed', { reason: 'listen' }, err);
    }
    this.running = false;
    if ((this.again || !ok) && !this.closed && !this.timer) this.schedule();
    this.again = false;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.off();
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }
}
