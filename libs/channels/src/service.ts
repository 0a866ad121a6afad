import { GatewayError, SerialQueue, maskSecret, nowSeconds, type ChangeBus, type SecretBox } from '@gw/core';
import { CHANNEL_STATUS, ROLE, type ChannelExpected, type ChannelListFilter, type ChannelRow, type ChannelsStore, type NewChannelRow } from '@gw/db';
import { isCredentialHeader, reasoningEchoMode } from '@gw/providers';
import type { ChannelCreate, ChannelUpdate, ChannelView } from './schemas';
import { normalizeHeaderPolicy } from './header-policy';
import { normalizeFailureRules } from './failure-rules';
import { normalizeOverrides } from './overrides';
import { KEY_STATUS, keyEntries, keyListBusy, MAX_KEY_LIST_TRIES, MAX_KEYS_PER_CHANNEL, usableKey } from './keys';
import { normalizeBaseUrl, normalizeHeaders, normalizeMapping, normalizeModels, normalizeName } from './validate';

export type ChannelStatus = 1 | 2 | 3;

/** Extra headers as the API shows them: credential-looking values masked like the key. */
function maskHeaders(h: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(h)) out[name] = isCredentialHeader(name, value) ? maskSecret(value) : value;
  return out;
}

/** What maskSecret shows: `abcd…wxyz`, or stars for a short secret (never a real header value: `…` is not Latin-1). */
const MASKED = /^(?:[^…]{4}…[^…]{4}|\*+)$/;

/**
 * A header sent back exactly as the API masked it (a read-modify-write) keeps its stored value (`kept`: the write
 * depends on `stored`). A masked value that matches nothing stored (the secret changed or went since it was read)
 * is refused: written, the mask would become the secret, and guessed, an older secret would come back.
 */
function keepMaskedHeaders(next: Record<string, string>, stored: Record<string, string>): { headers: Record<string, string>; kept: boolean } {
  let kept = false;
  for (const [name, value] of Object.entries(next)) {
    const old = stored[name];
    if (old !== undefined && old !== value && isCredentialHeader(name, old) && maskSecret(old) === value) {
      next[name] = old;
      kept = true;
    } else if (old !== value && MASKED.test(value) && isCredentialHeader(name, old ?? value)) {
      throw new GatewayError(409, 'masked_header_stale', `headers: "${name}" was sent masked but the stored value changed since it was read; read the channel again, or send the full value`, { param: `headers.${name}` });
    }
  }
  return { headers: next, kept };
}

const notFound = (id: number) => new GatewayError(404, 'channel_not_found', `No channel ${id}`, { param: 'id' });

/**
 * Channel administration (the /api/channel/ routes) and status changes by the health checker.
 * Every write emits `channel.changed` after it commits, so the ChannelRegistry snapshot follows.
 */
export class ChannelService {
  constructor(private readonly repo: ChannelsStore, private readonly secrets: SecretBox, private readonly bus: ChangeBus) {}

  private readonly statusLock = new SerialQueue();

  /** The API view of a row: the key masked, never decrypted beyond that. */
  view(r: ChannelRow): ChannelView {
    let masked = '';
    try {
      masked = maskSecret(this.secrets.open(r.key));
    } catch {
      masked = '(unreadable: sealed with another SECRET_KEY)';
    }
    return {
      id: r.id, name: r.name, type: r.type, base_url: r.baseUrl, key: masked, models: r.models,
      model_mapping: r.modelMapping, group: r.group, tag: r.tag, priority: r.priority, weight: r.weight,
      status: r.status, status_reason: r.statusReason, timeout_ms: r.timeoutMs, headers: maskHeaders(r.headers),
      header_policy: normalizeHeaderPolicy(r.headerPolicy),
      key_selection: r.keySelection, key_count: keyEntries(r).length, usable_keys: keyEntries(r).filter(usableKey).length,
      failure_rules: r.failureRules ?? {}, first_byte_timeout_ms: r.firstByteTimeoutMs, probe_interval_ms: r.probeIntervalMs,
      overrides: (r.overrides ?? []) as ChannelView['overrides'], billing_model: r.billingModel,
      reasoning_echo: reasoningEchoMode(r.reasoningEcho),
      response_time_ms: r.responseTimeMs, tested_at: r.testedAt, created_at: r.createdAt, updated_at: r.updatedAt,
    };
  }

  async create(input: ChannelCreate): Promise<ChannelView> {
    const now = nowSeconds();
    const all = [input.key, ...(input.keys ?? [])];
    if (all.length > MAX_KEYS_PER_CHANNEL) throw new GatewayError(400, 'invalid_value', `a channel holds at most ${MAX_KEYS_PER_CHANNEL} keys`, { param: 'keys' });
    const keys = all.map((k, i) => ({ id: i + 1, key: this.sealKey(k), status: KEY_STATUS.enabled, reason: '', disabledAt: null, createdAt: now }));
    const row = await this.repo.insert({
      name: normalizeName(input.name),
      type: input.type,
      baseUrl: normalizeBaseUrl(input.base_url),
      key: keys[0]!.key,
      keys,
      keySelection: input.key_selection ?? 'random',
      failureRules: normalizeFailureRules(input.failure_rules),
      firstByteTimeoutMs: input.first_byte_timeout_ms ?? null,
      probeIntervalMs: input.probe_interval_ms ?? null,
      models: normalizeModels(input.models),
      modelMapping: normalizeMapping(input.model_mapping ?? {}),
      group: input.group ?? 'default',
      tag: input.tag?.trim() ?? '',
      priority: input.priority ?? 0,
      weight: input.weight ?? 1,
      status: input.status ?? CHANNEL_STATUS.enabled,
      timeoutMs: input.timeout_ms ?? 300_000,
      headers: normalizeHeaders(input.headers ?? {}),
      headerPolicy: normalizeHeaderPolicy(input.header_policy),
      overrides: normalizeOverrides(input.overrides),
      billingModel: input.billing_model ?? 'requested',
      reasoningEcho: input.reasoning_echo ?? 'auto',
      createdAt: now,
      updatedAt: now,
    });
    await this.bus.committed('channel.changed', { channelId: row.id });
    return this.view(row);
  }

  async list(f: ChannelListFilter): Promise<{ items: ChannelView[]; total: number }> {
    const r = await this.repo.list(f);
    return { items: r.items.map((c) => this.view(c)), total: r.total };
  }

  async get(id: number): Promise<ChannelView> {
    const row = await this.repo.byId(id);
    if (!row) throw notFound(id);
    return this.view(row);
  }

  /**
   * Partial update: only fields present change; an omitted or empty `key` keeps the stored key.
   * `actor`: the caller's role, since a new `base_url` is root's alone (see below).
   * What the write takes from the row read first (the key list a new `key` goes onto, the credential headers sent
   * back masked) is a compare-and-set: a write that changed them in between makes this one read and decide again.
   */
  async update(actor: { role: number }, input: ChannelUpdate): Promise<ChannelView> {
    // `key` is the first key: a new value replaces it (enabled again, as a fresh credential).
    const newKey = input.key !== undefined && input.key.trim() !== '' ? this.sealKey(input.key) : undefined;
    for (let i = 0; i < MAX_KEY_LIST_TRIES; i++) {
      const stored = await this.repo.byId(input.id);
      if (!stored) throw notFound(input.id);
      const { patch, expected } = this.updatePatch(actor, input, stored);
      if (newKey !== undefined) {
        // The rest of the list is also written by ChannelKeyService (refusals, the prober, the key routes, on any
        // node) from a list it read; on a conflict the new key goes onto the fresh list (their change to the other
        // keys stands, and theirs to the old key 1 is dropped: ChannelKeyService leaves a replaced key alone).
        const [first, ...rest] = keyEntries(stored);
        Object.assign(patch, { key: newKey, keys: [{ ...first!, key: newKey, status: KEY_STATUS.enabled, reason: '', disabledAt: null }, ...rest] });
        expected.keys = stored.keys ?? [];
      }
      const conditional = expected.keys !== undefined || expected.headers !== undefined;
      const row = conditional ? await this.repo.updateIf(input.id, expected, patch) : await this.repo.update(input.id, patch);
      if (row) {
        await this.bus.committed('channel.changed', { channelId: row.id });
        return this.view(row);
      }
      if (!conditional) throw notFound(input.id);
    }
    throw keyListBusy();
  }

  /** The row patch of a PUT against the row `stored`, and what it took from that row (see update). */
  private updatePatch(actor: { role: number }, input: ChannelUpdate, stored: ChannelRow): { patch: Partial<NewChannelRow>; expected: ChannelExpected } {
    const patch: Partial<NewChannelRow> = { updatedAt: nowSeconds() };
    const expected: ChannelExpected = {};
    if (input.name !== undefined) patch.name = normalizeName(input.name);
    if (input.type !== undefined) patch.type = input.type;
    if (input.base_url !== undefined) {
      const baseUrl = normalizeBaseUrl(input.base_url);
      // Every stored key and credential header goes to whatever base_url names. An admin never sees a key (reads
      // are masked), but could otherwise point the channel at its own server and read them there: only root moves
      // a channel's credentials to another address (an admin creates a new channel with keys of its own).
      if (baseUrl !== stored.baseUrl && actor.role < ROLE.root) {
        throw new GatewayError(403, 'insufficient_role', "Only root can change a channel's base_url: its stored keys would be sent to the new address", { param: 'base_url' });
      }
      // The address as read (a form sent whole) is not written: written, it would move the channel back if root
      // moved it after this read, past the check above (an admin's write sending the keys to the old address).
      if (baseUrl !== stored.baseUrl) patch.baseUrl = baseUrl;
    }
    if (input.key_selection !== undefined) patch.keySelection = input.key_selection;
    if (input.failure_rules !== undefined) patch.failureRules = normalizeFailureRules(input.failure_rules);
    if (input.first_byte_timeout_ms !== undefined) patch.firstByteTimeoutMs = input.first_byte_timeout_ms;
    if (input.probe_interval_ms !== undefined) patch.probeIntervalMs = input.probe_interval_ms;
    if (input.models !== undefined) patch.models = normalizeModels(input.models);
    if (input.model_mapping !== undefined) patch.modelMapping = normalizeMapping(input.model_mapping);
    if (input.group !== undefined) patch.group = input.group;
    if (input.tag !== undefined) patch.tag = input.tag.trim();
    if (input.priority !== undefined) patch.priority = input.priority;
    if (input.weight !== undefined) patch.weight = input.weight;
    if (input.status !== undefined) {
      patch.status = input.status;
      // An operator's decision replaces whatever the health checker said.
      patch.statusReason = input.status === CHANNEL_STATUS.manuallyDisabled ? 'disabled by an operator' : '';
    }
    if (input.timeout_ms !== undefined) patch.timeoutMs = input.timeout_ms;
    if (input.headers !== undefined) {
      const { headers, kept } = keepMaskedHeaders(normalizeHeaders(input.headers), stored.headers);
      patch.headers = headers;
      if (kept) expected.headers = stored.headers;
    }
    if (input.header_policy !== undefined) patch.headerPolicy = normalizeHeaderPolicy(input.header_policy);
    if (input.overrides !== undefined) patch.overrides = normalizeOverrides(input.overrides);
    if (input.billing_model !== undefined) patch.billingModel = input.billing_model;
    if (input.reasoning_echo !== undefined) patch.reasoningEcho = input.reasoning_echo;
    return { patch, expected };
  }

  async delete(id: number): Promise<void> {
    if (!(await this.repo.delete(id))) throw notFound(id);
    await this.bus.committed('channel.changed', { channelId: id });
  }

  /** Deletes the given ids (unknown ones are skipped); returns how many existed. */
  async deleteMany(ids: number[]): Promise<number> {
    const deleted = await this.repo.deleteMany([...new Set(ids)]);
    // One event per row: caches apply exactly these rows instead of reloading every channel; emitted together, so the
    // registry re-reads them in one query (BatchedRefresh) rather than one after another.
    await Promise.all(deleted.map((id) => this.bus.committed('channel.changed', { channelId: id })));
    return deleted.length;
  }

  /** Enables (1) or manually disables (2) every channel with `tag`; returns how many matched. */
  async setTagStatus(tag: string, status: 1 | 2): Promise<number> {
    const changed = await this.repo.setStatusByTag(tag, status, status === 2 ? 'disabled by an operator' : '', nowSeconds());
    await Promise.all(changed.map((id) => this.bus.committed('channel.changed', { channelId: id })));
    return changed.length;
  }

  /**
   * Sets a channel's status with a reason. The health checker uses 3 (auto-disabled) and 1 (recovered);
   * it never re-enables a channel an operator disabled (2): that call is ignored.
   */
  setStatus(id: number, status: ChannelStatus, reason: string): Promise<void> {
    // Read-then-write: one at a time, so a health decision cannot interleave with another.
    return this.statusLock.run(async () => {
      const row = await this.repo.byId(id);
      if (!row) return;
      if (row.status === CHANNEL_STATUS.manuallyDisabled && status !== CHANNEL_STATUS.manuallyDisabled) return;
      if (row.status === status && row.statusReason === reason) return;
      // Conditional in the store: an operator's disable committed since the read above stands (their update is not
      // under this lock, and on another node nothing here could wait for it).
      if (!(await this.repo.setHealthStatus(id, status, reason.slice(0, 500), nowSeconds()))) return;
      await this.bus.committed('channel.changed', { channelId: id });
    });
  }

  /** Records a probe result (response time, when); does not change the status. */
  async recordTest(id: number, responseTimeMs: number, at: number): Promise<void> {
    await this.repo.update(id, { responseTimeMs: Math.max(0, Math.round(responseTimeMs)), testedAt: at });
    await this.bus.committed('channel.changed', { channelId: id });
  }

  /** Seals one upstream key (trimmed, no line breaks). */
  sealKey(key: string): string {
    const k = key.trim();
    if (!k) throw new GatewayError(400, 'invalid_value', 'key must not be blank', { param: 'key' });
    if (/[\r\n\0]/.test(k)) throw new GatewayError(400, 'invalid_value', 'key must not contain line breaks', { param: 'key' });
    return this.secrets.seal(k);
  }
}
