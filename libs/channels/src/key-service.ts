import { GatewayError, SerialQueue, maskSecret, nowSeconds, type ChangeBus, type SecretBox } from '@gw/core';
import { CHANNEL_STATUS, type ChannelKeyEntry, type ChannelRow, type ChannelsStore } from '@gw/db';
import { KEY_STATUS, keyEntries, KeyStats, MAX_KEYS_PER_CHANNEL, nextKeyId, usableKey } from './keys';
import type { ChannelKeyView } from './schemas';
import type { ChannelService } from './service';

const notFound = (id: number) => new GatewayError(404, 'channel_not_found', `No channel ${id}`, { param: 'id' });
const keyNotFound = (id: number, keyId: number) => new GatewayError(404, 'channel_key_not_found', `Channel ${id} has no key ${keyId}`, { param: 'keyId' });
const NO_KEY_REASON = 'no usable key left';

/**
 * A channel's upstream keys: operators list (masked), add, remove, enable and disable them; the relay
 * auto-disables a key the upstream refused, and the prober re-enables it. A channel is auto-disabled only
 * when its last usable key goes, and comes back when a key does. Every write emits `channel.changed`.
 */
export class ChannelKeyService {
  constructor(private readonly repo: ChannelsStore, private readonly secrets: SecretBox, private readonly bus: ChangeBus,
    private readonly channels: ChannelService, readonly stats: KeyStats = new KeyStats()) {}

  /**
   * The key list is one JSON column, changed by read-modify-write: one change at a time, so two
   * concurrent refusals (or a refusal and an operator's change) cannot overwrite each other. (Across
   * gateway nodes that needs a row lock or a compare-and-set in the store.)
   */
  private readonly lock = new SerialQueue();

  async list(id: number): Promise<ChannelKeyView[]> {
    const row = await this.row(id);
    return keyEntries(row).map((e) => this.view(id, e));
  }

  add(id: number, keys: string[]): Promise<ChannelKeyView[]> {
    return this.lock.run(async () => {
      const row = await this.row(id);
      const entries = [...keyEntries(row)];
      if (entries.length + keys.length > MAX_KEYS_PER_CHANNEL) {
        throw new GatewayError(409, 'too_many_channel_keys', `a channel holds at most ${MAX_KEYS_PER_CHANNEL} keys`, { param: 'keys' });
      }
      const now = nowSeconds();
      for (const k of keys) entries.push({ id: nextKeyId(entries), key: this.channels.sealKey(k), status: KEY_STATUS.enabled, reason: '', disabledAt: null, createdAt: now });
      await this.write(row, entries);
      await this.comeBackIfKeyless(id);
      return entries.map((e) => this.view(id, e));
    });
  }

  /** Removes a key; the last one cannot go (a channel without a key would fail every request). */
  remove(id: number, keyId: number): Promise<void> {
    return this.lock.run(async () => {
      const row = await this.row(id);
      const entries = keyEntries(row);
      if (!entries.some((e) => e.id === keyId)) throw keyNotFound(id, keyId);
      if (entries.length === 1) throw new GatewayError(409, 'last_channel_key', 'A channel keeps at least one key; add another first or delete the channel', { param: 'keyId' });
      await this.write(row, entries.filter((e) => e.id !== keyId));
      this.stats.forget(id, keyId);
      await this.settleChannel(id);
    });
  }

  /** An operator enables (1) or disables (2) a key. */
  setByOperator(id: number, keyId: number, status: 1 | 2): Promise<ChannelKeyView> {
    return this.lock.run(async () => {
      const row = await this.row(id);
      const entries = keyEntries(row);
      if (!entries.some((e) => e.id === keyId)) throw keyNotFound(id, keyId);
      const next = entries.map((e) => (e.id !== keyId ? e : status === 1
        ? { ...e, status: KEY_STATUS.enabled, reason: '', disabledAt: null }
        : { ...e, status: KEY_STATUS.manuallyDisabled, reason: 'disabled by an operator', disabledAt: nowSeconds() }));
      await this.write(row, next);
      await this.settleChannel(id);
      return this.view(id, next.find((e) => e.id === keyId)!);
    });
  }

  /**
   * The upstream refused this key (auth, payment, quota): it is set aside with the reason (already
   * scrubbed). Returns the usable keys left. Only an enabled key changes; an operator's disable stays.
   */
  autoDisable(id: number, keyId: number, reason: string): Promise<number> {
    return this.lock.run(async () => {
      const row = await this.repo.byId(id);
      if (!row) return 0;
      const entries = keyEntries(row);
      const hit = entries.find((e) => e.id === keyId);
      if (hit?.status === KEY_STATUS.enabled) {
        await this.write(row, entries.map((e) => (e.id === keyId ? { ...e, status: KEY_STATUS.autoDisabled, reason: reason.slice(0, 500), disabledAt: nowSeconds() } : e)));
      }
      return this.settleChannel(id);
    });
  }

  /** The prober saw an auto-disabled key work again. */
  reEnable(id: number, keyId: number): Promise<void> {
    return this.lock.run(async () => {
      const row = await this.repo.byId(id);
      if (!row) return;
      const entries = keyEntries(row);
      if (entries.find((e) => e.id === keyId)?.status !== KEY_STATUS.autoDisabled) return;
      await this.write(row, entries.map((e) => (e.id === keyId ? { ...e, status: KEY_STATUS.enabled, reason: '', disabledAt: null } : e)));
      await this.comeBackIfKeyless(id);
    });
  }

  /** Auto-disables the channel when no key is usable; brings it back if that was the only reason. Returns usable keys. */
  private async settleChannel(id: number): Promise<number> {
    const row = (await this.repo.byId(id))!;
    const usable = keyEntries(row).filter(usableKey).length;
    if (!usable && row.status === CHANNEL_STATUS.enabled) await this.channels.setStatus(id, CHANNEL_STATUS.autoDisabled, NO_KEY_REASON);
    if (usable) await this.comeBackIfKeyless(id);
    return usable;
  }

  private async comeBackIfKeyless(id: number): Promise<void> {
    const row = (await this.repo.byId(id))!;
    if (row.status === CHANNEL_STATUS.autoDisabled && row.statusReason === NO_KEY_REASON && keyEntries(row).some(usableKey)) {
      await this.channels.setStatus(id, CHANNEL_STATUS.enabled, '');
    }
  }

  private async write(row: ChannelRow, keys: ChannelKeyEntry[]): Promise<void> {
    await this.repo.update(row.id, { keys, key: keys[0]!.key, updatedAt: nowSeconds() });
    await this.bus.emit('channel.changed', { channelId: row.id });
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
    const s = this.stats.get(channelId, e.id);
    return { id: e.id, key: masked, status: e.status, reason: e.reason, disabled_at: e.disabledAt, created_at: e.createdAt, requests: s.requests, failures: s.failures, last_used_at: s.lastUsedAt };
  }
}
