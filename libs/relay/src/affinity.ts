/**
 * Session affinity: the requests of one conversation go to the channel that served it last, so the
 * upstream's prompt cache (kept per account, per model) is hit instead of rewritten on another channel.
 *
 * - The conversation is the client's `x-claude-code-session-id` header, else the body's
 *   `metadata.user_id`, else none (no affinity). It is scoped by user, group and model: one user cannot
 *   steer another's routing, and a model switch (a cache of its own upstream) pins separately.
 * - A pin only reorders the channels routing already chose, and only inside the top priority tier that
 *   routing would try first: priority still wins (a higher-priority channel coming back takes over, and
 *   the conversation re-pins there), an unhealthy or disabled channel is never a candidate at all.
 * - A failed attempt on the pinned channel drops the pin; the channel that then succeeds is pinned.
 * - Bounded memory: an LRU of at most `maxEntries` pins (evicted in batches of 1/16 of it), each expiring
 *   `ttlMs` after its last use.
 * - Shared fairly: one user holds at most `maxPerUser` pins, its own least recently used going first. With one LRU
 *   for all, a user sending cheap requests under 100,000 session ids evicted everyone else's pins, and their next
 *   requests missed their prompt caches (cache writes cost more than reads) on other channels.
 */
import type { Routable } from './router';

export interface AffinityOptions {
  /** A pin unused this long is forgotten (ms); 0 disables affinity. */
  ttlMs: number;
  /** Most pins held; the least recently used goes first. */
  maxEntries: number;
  /** Most pins one user holds (its own least recently used goes first); default a tenth of maxEntries. */
  maxPerUser?: number;
  now?: () => number;
}

/** The conversation a request belongs to, or null. */
export function conversationOf(headers: Headers, body: { metadata?: unknown }): string | null {
  const h = headers.get('x-claude-code-session-id');
  if (h && h.trim()) return `h:${h.trim()}`;
  const uid = (body.metadata as { user_id?: unknown } | null | undefined)?.user_id;
  return typeof uid === 'string' && uid ? `m:${uid}` : null;
}

export class SessionAffinity {
  /** key → pinned channel and expiry; Map order is the LRU order (oldest first). */
  private readonly pins = new Map<string, { channelId: number; expires: number }>();
  /** Each user's pin keys, in the same LRU order (a Set keeps insertion order). */
  private readonly byUser = new Map<string, Set<string>>();
  private readonly now: () => number;
  private readonly maxPerUser: number;

  constructor(private readonly o: AffinityOptions) {
    this.now = o.now ?? Date.now;
    this.maxPerUser = Math.max(1, o.maxPerUser ?? Math.ceil(o.maxEntries / 10));
  }

  get enabled(): boolean {
    return this.o.ttlMs > 0 && this.o.maxEntries > 0;
  }

  get size(): number {
    return this.pins.size;
  }

  /**
   * The pin key of a conversation. Hashed, so a pin costs the same few bytes whatever the client sent;
   * a collision only shares a routing preference, never data.
   */
  key(scope: { userId: number; group: string; model: string }, conversation: string | null): string | null {
    if (!conversation || !this.enabled) return null;
    return `${scope.userId}\u0000${scope.group}\u0000${scope.model}\u0000${Bun.hash(conversation).toString(36)}`;
  }

  /** `order` with the pinned channel moved first when it is in the tier `order` starts with; otherwise `order`. */
  apply<T extends Routable>(order: T[], key: string | null): T[] {
    if (!key || !order.length) return order;
    const pin = this.pins.get(key);
    if (!pin) return order;
    if (pin.expires <= this.now()) {
      this.drop(key);
      return order;
    }
    const at = order.findIndex((c) => c.id === pin.channelId);
    if (at <= 0 || order[at]!.priority !== order[0]!.priority) return order;
    return [order[at]!, ...order.slice(0, at), ...order.slice(at + 1)];
  }

  /** The conversation was served by `channelId`: pin (or refresh) it there. */
  pin(key: string | null, channelId: number): void {
    if (!key) return;
    // Re-inserted last in both orders: most recently used.
    this.pins.delete(key);
    this.pins.set(key, { channelId, expires: this.now() + this.o.ttlMs });
    const user = userOf(key);
    let mine = this.byUser.get(user);
    if (!mine) this.byUser.set(user, (mine = new Set()));
    mine.delete(key);
    mine.add(key);
    if (mine.size > this.maxPerUser) this.drop(mine.values().next().value!);
    if (this.pins.size > this.o.maxEntries) this.evict();
  }

  /** Forgets one pin, in both orders. */
  private drop(key: string): void {
    if (!this.pins.delete(key)) return;
    const user = userOf(key);
    const mine = this.byUser.get(user);
    if (mine?.delete(key) && !mine.size) this.byUser.delete(user);
  }

  /**
   * Drops the least recently used pins down to the cap, plus a slack of 1/16: evicting one per insert
   * would rescan the Map's deleted slots from its start every time (measured at ~60 µs per pin at 100k
   * entries); a batch pays that scan once per maxEntries/16 inserts.
   */
  private evict(): void {
    let excess = this.pins.size - this.o.maxEntries + Math.floor(this.o.maxEntries / 16);
    for (const k of this.pins.keys()) {
      if (excess-- <= 0) break;
      this.drop(k);
    }
  }

  /** `channelId` failed this conversation: forget the pin if it points there. */
  unpin(key: string | null, channelId: number): void {
    if (key && this.pins.get(key)?.channelId === channelId) this.drop(key);
  }
}

/** The user part of a pin key (see key()). */
const userOf = (key: string) => key.slice(0, key.indexOf('\u0000'));
