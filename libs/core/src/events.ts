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
   * 'user.changed' so per-request charges don't make every user cache re-read the row.
   */
  'balance.changed': { userId: number; balance: number };
  /** A relay API key changed (created, updated, revoked, deleted). */
  'apikey.changed': { keyId: number };
  /** A channel changed (created, updated, status, deleted); `id` null = many/all. */
  'channel.changed': { channelId: number | null };
  /** A model price changed; `model` null = many/all. */
  'price.changed': { model: string | null };
  /** A routing group changed (created, updated, deleted); `groupId` null = many/all. */
  'group.changed': { groupId: number | null };
}

type Listener<T> = (payload: T) => void;

export class ChangeBus {
  private readonly listeners = new Map<keyof ChangeEvents, Set<Listener<any>>>();

  on<K extends keyof ChangeEvents>(event: K, fn: Listener<ChangeEvents[K]>): () => void {
    let set = this.listeners.get(event);
    if (!set) this.listeners.set(event, (set = new Set()));
    set.add(fn);
    return () => set!.delete(fn);
  }

  /** Synchronous: when emit returns, every cache is already up to date. */
  emit<K extends keyof ChangeEvents>(event: K, payload: ChangeEvents[K]): void {
    for (const fn of this.listeners.get(event) ?? []) fn(payload);
  }
}
