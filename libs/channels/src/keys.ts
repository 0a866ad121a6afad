/**
 * A channel's upstream keys. Stored sealed in `channels.keys` (one JSON array, so a channel and its keys
 * change in one row write); `channels.key` mirrors the first entry so the single-key API keeps working.
 * Rows written before multi-key support have `keys = []`: their `key` is key 1.
 */
import { GatewayError, sha256Hex } from '@gw/core';
import type { ChannelKeyEntry, ChannelRow } from '@gw/db';

export const KEY_STATUS = { enabled: 1, manuallyDisabled: 2, autoDisabled: 3 } as const;

/** Most keys one channel may hold (each is tried in turn when the others fail). */
export const MAX_KEYS_PER_CHANNEL = 100;

/**
 * Most tries of one key-list change by compare-and-set: each failed try means another write to the list
 * committed in between, so this many in a row only happens under a storm of writes to one channel.
 */
export const MAX_KEY_LIST_TRIES = 20;

/** The key list kept changing under a compare-and-set (see MAX_KEY_LIST_TRIES). */
export const keyListBusy = () => new GatewayError(409, 'channel_keys_busy', "The channel's key list kept changing; try again", { param: 'id' });

/** The stored entries of a row, materialising the legacy single key as key 1. */
export function keyEntries(row: Pick<ChannelRow, 'key' | 'keys' | 'createdAt'>): ChannelKeyEntry[] {
  if (row.keys?.length) return row.keys;
  return [{ id: 1, key: row.key, status: KEY_STATUS.enabled, reason: '', disabledAt: null, createdAt: row.createdAt }];
}

/** The next key id: one more than the largest in use. */
export function nextKeyId(entries: ChannelKeyEntry[]): number {
  return entries.reduce((m, e) => Math.max(m, e.id), 0) + 1;
}

/**
 * Which key an automatic change is about: its id and the fingerprint of its stored (sealed) value. An id alone
 * names whatever key holds it now: PUT /api/channel/ gives key 1 a new value under the same id, and removing the
 * key with the highest id frees that id for the next key added. The sealed value is new at every sealing (a
 * random IV), so an operator's new key, even with the same secret, is another key.
 */
export interface KeyRef {
  id: number;
  fingerprint: string;
}

/** The fingerprint of a sealed key (a hash of ciphertext: it says nothing of the secret). */
export const keyFingerprint = (sealed: string): string => sha256Hex(sealed).slice(0, 24);

/** The stored entry is still the key `ref` names. */
export const isKey = (e: ChannelKeyEntry, ref: KeyRef): boolean => e.id === ref.id && keyFingerprint(e.key) === ref.fingerprint;

/** A key can carry traffic. */
export const usableKey = (e: { status: number }) => e.status === KEY_STATUS.enabled;

/** One key value's counters. */
interface KeyCounters { requests: number; failures: number; lastUsedAt: number | null }

/**
 * Per-key counters, in memory (the request path never writes the database for them); they restart at zero
 * with the process. Keyed by channel and KeyRef: a key the operator puts under an old id starts at zero
 * rather than showing the replaced key's requests and failures. Per key id only the last two values used are
 * kept (the current one, and the one before for requests still in flight with it): every value a key id ever
 * held kept its counters until the id was removed, so replacing a key in a loop grew memory without bound.
 */
export class KeyStats {
  private readonly m = new Map<string, Array<{ fingerprint: string; s: KeyCounters }>>();

  private static slot(channelId: number, keyId: number): string {
    return `${channelId}:${keyId}`;
  }

  /** One upstream request made with this key; `ok` false when it failed for the upstream's reasons. */
  record(channelId: number, key: KeyRef, ok: boolean): void {
    const k = KeyStats.slot(channelId, key.id);
    const values = this.m.get(k) ?? [];
    let s = values.find((v) => v.fingerprint === key.fingerprint)?.s;
    if (!s) {
      s = { requests: 0, failures: 0, lastUsedAt: null };
      this.m.set(k, [{ fingerprint: key.fingerprint, s }, ...values].slice(0, 2));
    }
    s.requests++;
    if (!ok) s.failures++;
    s.lastUsedAt = Math.floor(Date.now() / 1000);
  }

  get(channelId: number, key: KeyRef): KeyCounters {
    const s = this.m.get(KeyStats.slot(channelId, key.id))?.find((v) => v.fingerprint === key.fingerprint)?.s;
    return s ? { ...s } : { requests: 0, failures: 0, lastUsedAt: null };
  }

  /** Key ids holding counters (tests). */
  get size(): number {
    return this.m.size;
  }

  /** Drops the counters of a removed key id (whatever values it held), or of every key of the channel. */
  forget(channelId: number, keyId?: number): void {
    if (keyId !== undefined) {
      this.m.delete(KeyStats.slot(channelId, keyId));
      return;
    }
    const prefix = `${channelId}:`;
    for (const k of this.m.keys()) if (k.startsWith(prefix)) this.m.delete(k);
  }
}
