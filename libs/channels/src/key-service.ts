import { GatewayError, SerialQueue, maskSecret, nowSeconds, type ChangeBus, type SecretBox } from '@gw/core';
import { CHANNEL_STATUS, type ChannelKeyEntry, type ChannelRow, type ChannelsStore } from '@gw/db';
import { isKey, KEY_STATUS, keyEntries, keyFingerprint, keyListBusy, KeyStats, MAX_KEY_LIST_TRIES, MAX_KEYS_PER_CHANNEL, nextKeyId, usableKey, type KeyRef } from './keys';
import type { ChannelKeyView } from './schemas';
import type { ChannelService } from './service';

const notFound = (id: number) => new GatewayError(404, 'channel_not_found', `No channel ${id}`, { param: 'id' });
const keyNotFound = (id: number, keyId: number) => new GatewayError(404, 'channel_key_not_found', `Channel ${id} has no key ${keyId}`, { param: 'keyId' });
const NO_KEY_REASON = 'no usable key left';
/** The row a change needs (an operator's change to a missing channel is a 404). */
function required(id: number, row: ChannelRow | undefined): ChannelRow {
  if (!row) throw notFound(id);
  return row;
}

/**
 * A channel's upstream keys: operators list (masked), add, remove, enable and disable them; the relay
 * auto-disables a key the upstream refused, and the prober re-enables it. A channel is auto-disabled only
 * when its last usable key goes, and comes back when a key does. Every write emits `channel.changed`.
 */
export class ChannelKeyService {
  constructor(private readonly repo: ChannelsStore, private readonly secrets: SecretBox, private readonly bus: ChangeBus,
    private readonly channels: ChannelService, readonly stats: KeyStats = new KeyStats()) {}

  /**
   * The key list is one JSON column, changed by read-modify-write. Every write is a compare-and-set in the
   * store (see `change`), which is what keeps writers on other nodes and the operator's PUT /api/channel/
   * (ChannelService.update) from undoing one another; this queue only spares this node's own changes the retries.
   */
  private readonly lock = new SerialQueue();

  async list(id: number): Promise<ChannelKeyView[]> {
    const row = await this.row(id);
    return keyEntries(row).map((e) => this.view(id, e));
  }

  add(id: number, keys: string[]): Promise<ChannelKeyView[]> {
    return this.lock.run(async () => {
      const sealed = keys.map((k) => this.channels.sealKey(k));
      const written = (await this.change(id, (row) => {
        const entries = [...keyEntries(required(id, row))];
        if (entries.length + sealed.length > MAX_KEYS_PER_CHANNEL) {
          throw new GatewayError(409, 'too_many_channel_keys', `a channel holds at most ${MAX_KEYS_PER_CHANNEL} keys`, { param: 'keys' });
        }
        const now = nowSeconds();
        for (const key of sealed) entries.push({ id: nextKeyId(entries), key, status: KEY_STATUS.enabled, reason: '', disabledAt: null, createdAt: now });
        return entries;
      }))!;
      await this.comeBackIfKeyless(id);
      return written.map((e) => this.view(id, e));
    });
  }

  /** Removes a key; the last one cannot go (a channel without a key would fail every request). */
  remove(id: number, keyId: number): Promise<void> {
    return this.lock.run(async () => {
      await this.change(id, (row) => {
        const entries = keyEntries(required(id, row));
        if (!entries.some((e) => e.id === keyId)) throw keyNotFound(id, keyId);
        if (entries.length === 1) throw new GatewayError(409, 'last_channel_key', 'A channel keeps at least one key; add another first or delete the channel', { param: 'keyId' });
        return entries.filter((e) => e.id !== keyId);
      });
      this.stats.forget(id, keyId);
      await this.settleChannel(id);
    });
  }

  /** An operator enables (1) or disables (2) a key. */
  setByOperator(id: number, keyId: number, status: 1 | 2): Promise<ChannelKeyView> {
    return this.lock.run(async () => {
      const written = (await this.change(id, (row) => {
        const entries = keyEntries(required(id, row));
        if (!entries.some((e) => e.id === keyId)) throw keyNotFound(id, keyId);
        return entries.map((e) => (e.id !== keyId ? e : status === 1
          ? { ...e, status: KEY_STATUS.enabled, reason: '', disabledAt: null }
          : { ...e, status: KEY_STATUS.manuallyDisabled, reason: 'disabled by an operator', disabledAt: nowSeconds() }));
      }))!;
      await this.settleChannel(id);
      return this.view(id, written.find((e) => e.id === keyId)!);
    });
  }

  /**
   * The upstream refused this key (auth, payment, quota): it is set aside with the reason (already
   * scrubbed). Returns the usable keys left. Only that key, still enabled, changes: an operator's disable
   * stays, and a key the operator has since replaced (another value under the same id) is not the one refused.
   */
  autoDisable(id: number, key: KeyRef, reason: string): Promise<number> {
    return this.lock.run(async () => {
      let gone = false;
      await this.change(id, (row) => {
        if (!row) return (gone = true), null;
        const entries = keyEntries(row);
        if (entries.find((e) => isKey(e, key))?.status !== KEY_STATUS.enabled) return null;
        return entries.map((e) => (isKey(e, key) ? { ...e, status: KEY_STATUS.autoDisabled, reason: reason.slice(0, 500), disabledAt: nowSeconds() } : e));
      });
      return gone ? 0 : this.settleChannel(id);
    });
  }

  /** The prober saw this auto-disabled key work again (another value under its id since is left as it is). */
  reEnable(id: number, key: KeyRef): Promise<void> {
    return this.lock.run(async () => {
      const written = await this.change(id, (row) => {
        if (!row) return null;
        const entries = keyEntries(row);
        if (entries.find((e) => isKey(e, key))?.status !== KEY_STATUS.autoDisabled) return null;
        return entries.map((e) => (isKey(e, key) ? { ...e, status: KEY_STATUS.enabled, reason: '', disabledAt: null } : e));
      });
      if (written) await this.comeBackIfKeyless(id);
    });
  }

  /**
   * Writes `next(row)` over the list it was computed from, by compare-and-set; when another write changed
   * the list in between, reads the fresh row and decides again (so `next` may run more than once, and may
   * throw or return null: nothing to write). Returns the entries written, or null.
   */
  private async change(id: number, next: (row: ChannelRow | undefined) => ChannelKeyEntry[] | null): Promise<ChannelKeyEntry[] | null> {
    for (let i = 0; i < MAX_KEY_LIST_TRIES; i++) {
      const row = await this.repo.byId(id);
      const keys = next(row);
      if (!keys || !row) return null;
      if (await this.repo.updateIf(id, { keys: row.keys ?? [] }, { keys, key: keys[0]!.key, updatedAt: nowSeconds() })) {
        await this.bus.committed('channel.changed', { channelId: id });
        return keys;
      }
    }
    throw keyListBusy();
  }

  /** Auto-disables the channel when no key is usable; brings it back if that was the only reason. Returns usable keys. */
  private async settleChannel(id: number): Promise<number> {
    // The channel may have been deleted since the key list was written (an operator, on any node): nothing to settle.
    const row = await this.repo.byId(id);
    if (!row) return 0;
    const usable = keyEntries(row).filter(usableKey).length;
    if (!usable && row.status === CHANNEL_STATUS.enabled) await this.channels.setStatus(id, CHANNEL_STATUS.autoDisabled, NO_KEY_REASON);
    if (usable) await this.comeBackIfKeyless(id);
    return usable;
  }

  private async comeBackIfKeyless(id: number): Promise<void> {
    const row = await this.repo.byId(id);
    if (row && row.status === CHANNEL_STATUS.autoDisabled && row.statusReason === NO_KEY_REASON && keyEntries(row).some(usableKey)) {
      await this.channels.setStatus(id, CHANNEL_STATUS.enabled, '');
    }
  }

  private async row(id: number): Promise<ChannelRow> {
    const row = await this.repo.byId(id);
    if (!row) throw notFound(id);
    return row;
  }

  private view(channelId: number, e: ChannelKeyEntry): ChannelKeyView {
    let masked: string;
    try {
      masked = maskSecret(this.secrets.open(e.key));
    } catch {
      masked = '(unreadable: sealed with another SECRET_KEY)';
    }
    const s = this.stats.get(channelId, { id: e.id, fingerprint: keyFingerprint(e.key) });
    return { id: e.id, key: masked, status: e.status, reason: e.reason, disabled_at: e.disabledAt, created_at: e.createdAt, requests: s.requests, failures: s.failures, last_used_at: s.lastUsedAt };
  }
}
