/**
 * In-process change notifications. Every write to a record that a hot-path cache holds emits an
 * event after its transaction commits; caches listen and refresh just that record. This keeps
 * reads on the request path in memory without ever serving a stale key, channel, price or balance.
 */
export interface ChangeEvents {
  /** A user's row changed (status, group, role, quota/balance, deletion). */
  'user.changed': { userId: number };
  /**
   * Only a user's balance moved (a ledger entry was applied), to `balance`. Kept apart from
   * 'user.changed' so per-request charges don't make every user cache re-read the row. `version`
   * (PostgreSQL ledger entries): users.balance_version after the move, for the shared admission mirror.
   */
  'balance.changed': { userId: number; balance: number; version?: number };
  /** A relay API key changed (created, updated, revoked, deleted). */
  'apikey.changed': { keyId: number };
  /** A channel changed (created, updated, status, deleted); `id` null = many/all. */
  'channel.changed': { channelId: number | null };
  /** A model price changed; `model` null = many/all. */
  'price.changed': { model: string | null };
  /** A routing group changed (created, updated, deleted); `groupId` null = many/all. */
  'group.changed': { groupId: number | null };
  /** A budget or low-balance threshold was set or cleared (another node's, through the change feed). */
  'budget.changed': Record<string, never>;
  /**
   * PostgreSQL mode: this node could not renew its holds for half a lease (cut off from Redis). Every metered
   * request in flight stops now, before its hold lapses and other nodes may spend what it covered.
   */
  'holds.lost': Record<string, never>;
}

/** A listener may refresh from storage asynchronously; emit waits for it before calling the next (see emit). */
type Listener<T> = (payload: T) => void | Promise<void>;

const DONE: Promise<void> = Promise.resolve();

/** Told when a committed write's refresh failed: whatever it is, the change feed's resync repairs the caches. */
export type RefreshFailed = (event: keyof ChangeEvents, err: unknown) => void;

export class ChangeBus {
  private readonly listeners = new Map<keyof ChangeEvents, Set<Listener<any>>>();
  private readonly repairs = new Set<RefreshFailed>();

  /** Registers who repairs the caches after a failed refresh of a committed write (see committed). */
  onRefreshFailed(fn: RefreshFailed): () => void {
    this.repairs.add(fn);
    return () => this.repairs.delete(fn);
  }

  /**
   * emit for a write that has already committed: resolves once every listener ran (read-your-writes, as emit),
   * and never rejects. The change is made whatever a cache did with it, so a writer must not answer an error a
   * client would retry (a second user or key created, a 409 on its name): a failure goes to the repairs
   * registered with onRefreshFailed (the change feed logs it and resyncs every cache, retried until it works).
   * With none registered it is thrown as by emit, so no failure goes unseen.
   */
  committed<K extends keyof ChangeEvents>(event: K, payload: ChangeEvents[K]): Promise<void> {
    return this.refreshed(event, () => this.emit(event, payload));
  }

  /**
   * committed, for a writer whose cache is refreshed by `refresh` itself rather than by listeners (budgets and
   * groups reload their books directly): resolves once it ran, and a failure goes to the repairs, not the writer.
   */
  async refreshed(event: keyof ChangeEvents, refresh: () => void | Promise<void>): Promise<void> {
    try {
      await refresh();
    } catch (err) {
      if (!this.repairs.size) throw err;
      for (const fn of this.repairs) fn(event, err);
    }
  }

  on<K extends keyof ChangeEvents>(event: K, fn: Listener<ChangeEvents[K]>): () => void {
    let set = this.listeners.get(event);
    if (!set) this.listeners.set(event, (set = new Set()));
    set.add(fn);
    return () => set!.delete(fn);
  }

  /**
   * Calls the listeners in registration order; one that returns a promise (a cache re-reading its
   * row) is awaited before the next runs, so a later listener (the in-flight guard) sees the caches
   * already refreshed. The promise resolves when every cache is up to date: writers await it before
   * answering (read-your-writes). When no listener is asynchronous everything has run by the time
   * emit returns, as before.
   *
   * Every listener hears every event: one that throws or whose refresh rejects (its pool refused the
   * re-read) does not stop the later ones, or a users cache failing would keep the in-flight guard from
   * stopping a revoked key's stream. The failure is still reported once all have run: thrown when every
   * listener was synchronous, else as the promise's rejection (one error as is, several as an AggregateError),
   * so the change feed still resyncs.
   */
  emit<K extends keyof ChangeEvents>(event: K, payload: ChangeEvents[K]): Promise<void> {
    const set = this.listeners.get(event);
    if (!set) return DONE;
    const errors: unknown[] = [];
    const fns = [...set];
    for (let i = 0; i < fns.length; i++) {
      let r: void | Promise<void>;
      try {
        r = fns[i]!(payload);
      } catch (err) {
        errors.push(err);
        continue;
      }
      if (r && typeof (r as Promise<void>).then === 'function') return this.finish(r as Promise<void>, fns.slice(i + 1), payload, errors);
    }
    if (errors.length) throw failure(errors);
    return DONE;
  }

  private async finish(pending: Promise<void>, rest: Listener<any>[], payload: unknown, errors: unknown[]): Promise<void> {
    try { await pending; } catch (err) { errors.push(err); }
    for (const fn of rest) {
      try { await fn(payload); } catch (err) { errors.push(err); }
    }
    if (errors.length) throw failure(errors);
  }
}

function failure(errors: unknown[]): unknown {
  return errors.length === 1 ? errors[0] : new AggregateError(errors, `${errors.length} change listeners failed`);
}
