/**
 * Which of a channel's keys a request uses, and which upstream answers mean "this key is refused"
 * (as opposed to "this channel is broken"): a refused key is set aside and the next key of the same
 * channel is tried, so one revoked or exhausted key never takes the whole channel down.
 */
import type { ChannelKey } from '@gw/channels';
import { isQuotaRefusal } from '@gw/providers';

/**
 * 401/403 (key rejected), 402 (unpaid), a 429 whose error type or code is about quota or billing rather than speed,
 * or Anthropic's 400 "credit balance is too low" (isQuotaRefusal: never read from text that may echo the client).
 */
export function isKeyRefusal(status: number, bodyText: string): boolean {
  if (status === 401 || status === 402 || status === 403) return true;
  return isQuotaRefusal(status, bodyText);
}

/** Picks a usable key per attempt: uniformly at random, or in turn per channel (round robin). */
export class KeyPicker {
  private readonly cursor = new Map<number, number>();
  /** Keys refused on this node, by the channel's key listing they were refused from. */
  private readonly aside = new WeakMap<readonly ChannelKey[], Set<number>>();

  constructor(private readonly rng: () => number = Math.random) {}

  /** An enabled key of the channel not yet tried in this request, or undefined when none is left. */
  pick(ch: { id: number; keys: ChannelKey[]; keySelection: string }, tried: ReadonlySet<number>): ChannelKey | undefined {
    const aside = this.aside.get(ch.keys);
    const usable = ch.keys.filter((k) => k.status === 1 && !tried.has(k.id) && !aside?.has(k.id));
    if (usable.length <= 1) return usable[0];
    if (ch.keySelection !== 'round_robin') return usable[Math.floor(this.rng() * usable.length)];
    // The cursor walks the key ids, so adding or disabling a key does not reset the rotation.
    const last = this.cursor.get(ch.id) ?? 0;
    const next = usable.find((k) => k.id > last) ?? usable[0]!;
    this.cursor.set(ch.id, next.id);
    return next;
  }

  /**
   * A key the upstream refused: no later request of this node picks it. Its auto-disable is written beside
   * the request, and until the channel is reloaded with it (a round trip or more on PostgreSQL) the
   * listing still says enabled. The mark belongs to that listing: the reload (the key stored disabled, or
   * enabled again since) ends it.
   */
  setAside(ch: { keys: ChannelKey[] }, keyId: number): void {
    let set = this.aside.get(ch.keys);
    if (!set) this.aside.set(ch.keys, (set = new Set()));
    set.add(keyId);
  }
}
