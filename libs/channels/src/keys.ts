/**
 * A channel's upstream keys. Stored sealed in `channels.keys` (one JSON array, so a channel and its keys
 * change in one row write); `channels.key` mirrors the first entry so the single-key API keeps working.
 * Rows written before multi-key support have `keys = []`: their `key` is key 1.
 */
import type { ChannelKeyEntry, ChannelRow } from '@gw/db';

export const KEY_STATUS = { enabled: 1, manuallyDisabled: 2, autoDisabled: 3 } as const;

/** Most keys one channel may hold (each is tried in turn when the others fail). */
export const MAX_KEYS_PER_CHANNEL = 100;

/** The stored entries of a row, materialising the legacy single key as key 1. */
export function keyEntries(row: Pick<ChannelRow, 'key' | 'keys' | 'createdAt'>): ChannelKeyEntry[] {
  if (row.keys?.length) return row.keys;
  return [{ id: 1, key: row.key, status: KEY_STATUS.enabled, reason: '', disabledAt: null, createdAt: row.createdAt }];
}

/** The next key id: one more than the largest in use. */
export function nextKeyId(entries: ChannelKeyEntry[]): number {
  return entries.reduce((m, e) => Math.max(m, e.id), 0) + 1;
}

/** A key can carry traffic. */
export const usableKey = (e: { status: number }) => e.status === KEY_STATUS.enabled;

/**
 * Per-key counters, in memory (the request path never writes the database for them); they restart at zero
 * with the process. Keyed by channel and key id.
 */
export class KeyStats {
  private readonly m = new Map<string, { requests: number; failures: number; lastUsedAt: number | null }>();

  private slot(channelId: number, keyId: number) {
    const k = `${channelId}:${keyId}`;
    let s = this.m.get(k);
    if (!s) this.m.set(k, (s = { requests: 0, failures: 0, lastUsedAt: null }));
    return s;
  }

  /** One upstream request made with this key; `ok` false when it failed for the upstream's reasons. */
  record(channelId: number, keyId: number, ok: boolean): void {
    const s = this.slot(channelId, keyId);
    s.requests++;
    if (!ok) s.failures++;
    s.lastUsedAt = Math.floor(Date.now() / 1000);
  }

  get(channelId: number, keyId: number): { requests: number; failures: number; lastUsedAt: number | null } {
    return this.m.get(`${channelId}:${keyId}`) ?? { requests: 0, failures: 0, lastUsedAt: null };
  }

  forget(channelId: number, keyId?: number): void {
    if (keyId !== undefined) this.m.delete(`${channelId}:${keyId}`);
    else for (const k of this.m.keys()) if (k.startsWith(`${channelId}:`)) this.m.delete(k);
  }
}
