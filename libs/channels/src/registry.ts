import { BatchedRefresh, stdLogger, type ChangeBus, type Logger, type SecretBox } from '@gw/core';
import { CHANNEL_STATUS, type BillingModel, type ChannelFailureRules, type ChannelRow, type ChannelsStore, type HeaderPolicy } from '@gw/db';
import { reasoningEchoMode, type ReasoningEcho } from '@gw/providers';
import { keyEntries, keyFingerprint, usableKey, type KeyRef } from './keys';
import { compileOverrides, type OverrideProgram } from './override-program';
import { RouteIndex } from './route-index';
import { ServedModels } from './served-models';

/** One upstream key of a channel, decrypted; `fingerprint` binds what is said of it to this value (see KeyRef). */
export interface ChannelKey extends KeyRef {
  apiKey: string;
  /** 1 enabled, 2 disabled by an operator, 3 auto-disabled. */
  status: number;
}

/** A channel as the relay uses it: key decrypted, groups split. Never sent to a client. */
export interface ChannelRecord {
  id: number;
  name: string;
  type: string;
  baseUrl: string;
  /** The first usable key (else the first): for single-key users (tests, realtime); /v1/messages picks among `keys`. */
  apiKey: string;
  /** Every key that could be decrypted, any status. */
  keys: ChannelKey[];
  keySelection: 'random' | 'round_robin';
  failureRules: ChannelFailureRules;
  firstByteTimeoutMs: number | null;
  probeIntervalMs: number | null;
  models: string[];
  modelMapping: Record<string, string>;
  groups: string[];
  tag: string;
  priority: number;
  weight: number;
  status: number;
  timeoutMs: number;
  headers: Record<string, string>;
  /** Which client headers and body fields reach the upstream (see header-policy.ts). */
  headerPolicy: HeaderPolicy;
  /** The channel's overrides, compiled when it was loaded; null = none. */
  overrides: OverrideProgram | null;
  /** Which model's price bills its requests. */
  billingModel: BillingModel;
  /** Whether thinking is sent back as `reasoning_content` (translated channels). */
  reasoningEcho: ReasoningEcho;
}

/**
 * Whether requests are routed to a channel: enabled, with at least one enabled key. An operator can enable a
 * channel whose keys are all disabled; routed, it would take one of the request's RELAY_MAX_ATTEMPTS for
 * nothing (three such channels ahead of a healthy one made every request fail with 503).
 */
const routable = (c: ChannelRecord) => c.status === CHANNEL_STATUS.enabled && c.keys.some(usableKey);

/**
 * In-memory snapshot of every channel for the request path (no DB read per request). Refreshed on
 * 'channel.changed' (the bus waits for it), so a change is visible to the next request after the write
 * returns. Build it with `ChannelRegistry.load`.
 */
export class ChannelRegistry {
  private readonly byId = new Map<number, ChannelRecord>();
  /** Routable channels by group and model, priority desc; one channel's change is applied in place. */
  private readonly index = new RouteIndex<ChannelRecord>();
  /** Every channel in the snapshot, any status, by group and model. */
  private readonly served = new ServedModels();
  private readonly unsubscribe: () => void;
  /** Changes heard while a re-read runs are re-read together in the next (a burst costs a few queries). */
  private readonly refreshes = new BatchedRefresh<number>((ids) => this.apply(ids));

  /** Reads every channel, then follows 'channel.changed'. */
  static async load(repo: ChannelsStore, secrets: SecretBox, bus: ChangeBus, log: Logger = stdLogger): Promise<ChannelRegistry> {
    return new ChannelRegistry(repo, secrets, bus, await repo.all(), log);
  }

  constructor(private readonly repo: ChannelsStore, private readonly secrets: SecretBox, bus: ChangeBus, rows: ChannelRow[],
    private readonly log: Logger = stdLogger) {
    this.loadAll(rows);
    this.unsubscribe = bus.on('channel.changed', ({ channelId }) => this.refresh(channelId));
  }

  /** Routable channels (enabled, with a usable key) serving `model` to `group`, highest priority first (a copy: callers may reorder it). */
  candidates(model: string, group: string): ChannelRecord[] {
    return this.index.list(group, model)?.slice() ?? [];
  }

  /** Whether some channel in the snapshot, of any status, serves `model` to `group`. */
  serves(model: string, group: string): boolean {
    return this.served.has(group, model);
  }

  /** Any channel (enabled or not) by id. */
  get(id: number): ChannelRecord | undefined {
    return this.byId.get(id);
  }

  /** Every model some enabled channel serves to `group`, sorted. */
  models(group: string): string[] {
    return [...(this.index.models(group) ?? [])].sort();
  }

  /** Every channel in the snapshot (health checks iterate this). */
  all(): ChannelRecord[] {
    return [...this.byId.values()];
  }

  /**
   * Re-reads a channel from the database and moves just it in the index: O(1) in the number of channels
   * (plus a splice within the lists it is in). Channels changed while a re-read runs are re-read together, in one
   * query, by the next (BatchedRefresh). `null` reloads everything (a change feed's resync); no write of this
   * gateway emits that (many-row writes emit one event per row). Read first, then swap: requests keep the old
   * snapshot until the new rows are in hand.
   */
  refresh(channelId: number | null): Promise<void> {
    return this.refreshes.run(channelId);
  }

  private async apply(ids: number[] | null): Promise<void> {
    if (ids === null) {
      this.loadAll(await this.repo.all());
      return;
    }
    const rows = new Map((await this.repo.byIds(ids)).map((r) => [r.id, r]));
    for (const id of ids) {
      const old = this.byId.get(id);
      if (old) {
        if (routable(old)) this.index.remove(old);
        this.served.remove(old);
        this.byId.delete(id);
      }
      const row = rows.get(id);
      const rec = row && this.put(row);
      if (rec && routable(rec)) this.index.add(rec);
    }
  }

  close(): void {
    this.unsubscribe();
  }

  private loadAll(rows: ChannelRow[]): void {
    this.byId.clear();
    this.index.clear();
    this.served.clear();
    for (const row of rows) this.put(row);
    // Added in index order, so every insertion lands at the end of its lists (no shifting).
    const enabled = [...this.byId.values()].filter(routable)
      .sort((a, b) => b.priority - a.priority || a.id - b.id);
    for (const c of enabled) this.index.add(c);
  }

  private put(row: ChannelRow): ChannelRecord | undefined {
    const keys: ChannelKey[] = [];
    for (const e of keyEntries(row)) {
      try {
        keys.push({ id: e.id, fingerprint: keyFingerprint(e.key), apiKey: this.secrets.open(e.key), status: e.status });
      } catch {
        // A key sealed under another SECRET_KEY cannot be used; leave it out rather than send garbage.
        this.log.error('channel.key_undecryptable', { channel: row.id, name: row.name, key: e.id, msg: 'key cannot be decrypted with the configured SECRET_KEY; key skipped' });
      }
    }
    if (!keys.length) return undefined;
    // Looked up by the requested model everywhere (`modelMapping[model] ?? model`): without a prototype, a model named
    // `constructor` or `toString` finds no inherited member (a function was sent upstream as the model).
    const modelMapping: Record<string, string> = Object.assign(Object.create(null), row.modelMapping);
    const rec: ChannelRecord = {
      id: row.id, name: row.name, type: row.type, baseUrl: row.baseUrl, apiKey: (keys.find((k) => k.status === 1) ?? keys[0]!).apiKey, keys,
      keySelection: row.keySelection === 'round_robin' ? 'round_robin' : 'random', failureRules: row.failureRules ?? {},
      firstByteTimeoutMs: row.firstByteTimeoutMs, probeIntervalMs: row.probeIntervalMs, models: row.models,
      modelMapping, groups: row.group.split(',').map((g) => g.trim()).filter(Boolean), tag: row.tag,
      priority: row.priority, weight: row.weight, status: row.status, timeoutMs: row.timeoutMs, headers: row.headers,
      headerPolicy: row.headerPolicy ?? {},
      overrides: compileOverrides(row.overrides, row.models, modelMapping),
      billingModel: row.billingModel === 'upstream' ? 'upstream' : 'requested',
      reasoningEcho: reasoningEchoMode(row.reasoningEcho),
    };
    this.byId.set(row.id, rec);
    this.served.add(rec);
    return rec;
  }
}
