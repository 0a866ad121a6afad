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
 * One process over one database: every write already emits on the local bus as it commits, so
 * there is nothing to receive and nothing is ever missed.
 */
export class LocalChangeFeed implements ChangeFeed {
  readonly listening = true;
  async close(): Promise<void> {}
}
