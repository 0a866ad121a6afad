import { SerialQueue, stdLogger, type ChangeBus, type Logger, type SecretBox } from '@gw/core';
import { CHANNEL_STATUS, type BillingModel, type ChannelFailureRules, type ChannelRow, type ChannelsStore, type HeaderPolicy } from '@gw/db';
import { keyEntries } from './keys';
import { compileOverrides, type OverrideProgram } from './override-program';

/** One upstream key of a channel, decrypted. */
export interface ChannelKey {
  id: number;
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
}

/**
 * In-memory snapshot of every channel for the request path (no DB read per request). Refreshed on
 * 'channel.changed' (the bus waits for it), so a change is visible to the next request after the write
 * returns. Build it with `ChannelRegistry.load`.
 */
export class ChannelRegistry {
  private readonly byId = new Map<number, ChannelRecord>();
  /** group → model → enabled channels, priority desc; rebuilt on every change (changes are rare). */
  private index = new Map<string, Map<string, ChannelRecord[]>>();
  private readonly unsubscribe: () => void;
  private readonly refreshes = new SerialQueue();

  /** Reads every channel, then follows 'channel.changed'. */
  static async load(repo: ChannelsStore, secrets: SecretBox, bus: ChangeBus, log: Logger = stdLogger): Promise<ChannelRegistry> {
    return new ChannelRegistry(repo, secrets, bus, await repo.all(), log);
  }

  constructor(private readonly repo: ChannelsStore, private readonly secrets: SecretBox, bus: ChangeBus, rows: ChannelRow[],
    private readonly log: Logger = stdLogger) {
    for (const row of rows) this.put(row);
    this.rebuild();
    this.unsubscribe = bus.on('channel.changed', ({ channelId }) => this.refresh(channelId));
  }

  /** Enabled channels serving `model` to `group`, highest priority first (a copy: callers may reorder it). */
  candidates(model: string, group: string): ChannelRecord[] {
    return this.index.get(group)?.get(model)?.slice() ?? [];
  }

  /** Any channel (enabled or not) by id. */
  get(id: number): ChannelRecord | undefined {
    return this.byId.get(id);
  }

  /** Every model some enabled channel serves to `group`, sorted. */
  models(group: string): string[] {
    return [...(this.index.get(group)?.keys() ?? [])].sort();
  }

  /** Every channel in the snapshot (health checks iterate this). */
  all(): ChannelRecord[] {
    return [...this.byId.values()];
  }

  /** Re-reads one channel (or all when null) from the database. */
  refresh(channelId: number | null): Promise<void> {
    return this.refreshes.run(async () => {
      // Read first, then swap: requests keep the old snapshot until the new rows are in hand.
      if (channelId === null) {
        const rows = await this.repo.all();
        this.byId.clear();
        for (const row of rows) this.put(row);
      } else {
        const row = await this.repo.byId(channelId);
        this.byId.delete(channelId);
        if (row) this.put(row);
      }
      this.rebuild();
    });
  }

  close(): void {
    this.unsubscribe();
  }

  private put(row: ChannelRow): void {
    const keys: ChannelKey[] = [];
    for (const e of keyEntries(row)) {
      try {
        keys.push({ id: e.id, apiKey: this.secrets.open(e.key), status: e.status });
      } catch {
        // A key sealed under another SECRET_KEY cannot be used; leave it out rather than send garbage.
        this.log.error('channel.key_undecryptable', { channel: row.id, name: row.name, key: e.id, msg: 'key cannot be decrypted with the configured SECRET_KEY; key skipped' });
      }
    }
    if (!keys.length) return;
    this.byId.set(row.id, {
      id: row.id, name: row.name, type: row.type, baseUrl: row.baseUrl, apiKey: (keys.find((k) => k.status === 1) ?? keys[0]!).apiKey, keys,
      keySelection: row.keySelection === 'round_robin' ? 'round_robin' : 'random', failureRules: row.failureRules ?? {},
      firstByteTimeoutMs: row.firstByteTimeoutMs, probeIntervalMs: row.probeIntervalMs, models: row.models,
      modelMapping: row.modelMapping, groups: row.group.split(',').map((g) => g.trim()).filter(Boolean), tag: row.tag,
      priority: row.priority, weight: row.weight, status: row.status, timeoutMs: row.timeoutMs, headers: row.headers,
      headerPolicy: row.headerPolicy ?? {},
      overrides: compileOverrides(row.overrides, row.models, row.modelMapping),
      billingModel: row.billingModel === 'upstream' ? 'upstream' : 'requested',
    });
  }

  private rebuild(): void {
    const index = new Map<string, Map<string, ChannelRecord[]>>();
    const enabled = [...this.byId.values()].filter((c) => c.status === CHANNEL_STATUS.enabled)
      .sort((a, b) => b.priority - a.priority || a.id - b.id);
    for (const c of enabled) {
      for (const g of c.groups) {
        let byModel = index.get(g);
        if (!byModel) index.set(g, (byModel = new Map()));
        for (const m of c.models) {
          const list = byModel.get(m);
          if (list) list.push(c);
          else byModel.set(m, [c]);
        }
      }
    }
    this.index = index;
  }
}
