import { Type, type Static } from '@sinclair/typebox';
import { GatewayError, readBounded } from '@gw/core';
import { estimateRequestTokens, type CountTokensRequest } from '@gw/formats';
import type { ProviderAdapter } from '@gw/providers';
import { applyBodyPolicy, applyHeaderPolicy } from '@gw/channels';
import type { GateKey } from './gate';
import type { RelayChannel } from './relay';
import { orderCandidates } from './router';
import { CountCache } from './count-cache';

/** Most of an upstream count_tokens answer that is read (it is `{"input_tokens": N}`). */
const COUNT_BODY_BYTES = 64 * 1024;

/** An entry of GET /v1/models (Anthropic's ModelInfo). */
export const ModelInfoSchema = Type.Object({
  type: Type.Literal('model'),
  id: Type.String(),
  display_name: Type.String(),
  created_at: Type.String({ description: 'RFC 3339; when this gateway process started serving the model' }),
});
export type ModelInfo = Static<typeof ModelInfoSchema>;

/** GET /v1/models: Anthropic's list shape. */
export const ModelPageSchema = Type.Object({
  data: Type.Array(ModelInfoSchema),
  has_more: Type.Boolean(),
  first_id: Type.Union([Type.String(), Type.Null()]),
  last_id: Type.Union([Type.String(), Type.Null()]),
});
export type ModelPage = Static<typeof ModelPageSchema>;

/** GET /v1/models and POST /v1/messages/count_tokens: what a key may use, and input token counts. */
export class ModelCatalog {
  /**
   * The gateway knows no release dates: models are dated by when this process started serving them, or
   * by `since` (unix seconds) when given, so that every node of a cluster answers the same date.
   */
  private readonly since: string;

  private readonly counts: CountCache;

  constructor(private readonly d: {
    channels: { candidates(model: string, group: string): RelayChannel[]; models(group: string): string[]; serves(model: string, group: string): boolean };
    adapter(type: string): ProviderAdapter;
    /** Burst limits of upstream counting (COUNT_TOKENS_*); defaults 1024 entries, 60 s, 8 per channel. */
    counting?: { cacheEntries: number; cacheTtlMs: number; maxInflight: number };
    since?: number;
    /** The group, then its fallbacks (RelayService.routeGroups); absent = the group alone. */
    routeGroups?: (group: string) => string[];
  }) {
    this.since = new Date((d.since ?? Math.floor(Date.now() / 1000)) * 1000).toISOString();
    const c = d.counting ?? { cacheEntries: 1024, cacheTtlMs: 60_000, maxInflight: 8 };
    this.counts = new CountCache({ maxEntries: c.cacheEntries, ttlMs: c.cacheTtlMs, maxInflight: c.maxInflight });
  }

  private groups(group: string): string[] {
    return this.d.routeGroups?.(group) ?? [group];
  }

  /**
   * Models served to the key's group or its fallbacks (what /v1/messages routes), intersected with the key's
   * allow-list. Before, a model only a fallback served was sent but not listed, and count_tokens answered 404.
   */
  modelIds(key: GateKey, group: string): string[] {
    const groups = this.groups(group);
    const served = groups.length === 1 ? this.d.channels.models(group) : [...new Set(groups.flatMap((g) => this.d.channels.models(g)))].sort();
    return key.models && key.models.length ? served.filter((m) => key.models!.includes(m)) : served;
  }

  info(id: string): ModelInfo {
    return { type: 'model', id, display_name: id, created_at: this.since };
  }

  /** Anthropic list paging: `limit` (1..1000, default 20), `after_id`, `before_id`. */
  list(key: GateKey, group: string, q: { limit?: number; after_id?: string; before_id?: string }): ModelPage {
    let ids = this.modelIds(key, group);
    if (q.after_id) ids = ids.slice(ids.indexOf(q.after_id) + 1);
    if (q.before_id) {
      const i = ids.indexOf(q.before_id);
      if (i >= 0) ids = ids.slice(0, i);
    }
    const limit = Math.min(1000, Math.max(1, q.limit ?? 20));
    const pageIds = q.before_id && !q.after_id ? ids.slice(-limit) : ids.slice(0, limit);
    const data = pageIds.map((id) => this.info(id));
    return { data, has_more: ids.length > pageIds.length, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null };
  }

  /** GET /v1/models/:id, 404 unless the key may use it. */
  get(key: GateKey, group: string, id: string): ModelInfo {
    if (!this.modelIds(key, group).includes(id)) {
      throw new GatewayError(404, 'model_not_found', `Model ${id} is not available to this key`, { param: 'model_id', type: 'not_found_error' });
    }
    return this.info(id);
  }

  /**
   * Input tokens of a request: asked of the upstream when the chosen channel can count (Anthropic-native),
   * else (or when that fails) the local estimate. Not billed. `userId` scopes the reuse of counts (see CountCache).
   */
  async countTokens(body: CountTokensRequest, group: string, clientHeaders: Headers, userId: number): Promise<{ input_tokens: number }> {
    // The first group (own, then fallbacks in order) with a channel for the model, as /v1/messages routes.
    const groups = this.groups(group);
    let candidates: RelayChannel[] = [];
    for (const g of groups) if ((candidates = this.d.channels.candidates(body.model, g)).length) break;
    // 404 only for a model no channel of any status serves (as /v1/messages decides it, from a per-group count);
    // a served model whose channels are all down is estimated locally below.
    if (!candidates.length && !groups.some((g) => this.d.channels.serves(body.model, g))) {
      throw new GatewayError(404, 'model_not_found', `Model ${body.model} is not served by this gateway`, { param: 'model', type: 'invalid_request_error' });
    }
    const ch = orderCandidates(candidates)[0];
    const adapter = ch && this.d.adapter(ch.type);
    const estimate = () => estimateRequestTokens(body);
    if (!ch || !adapter?.buildCountTokensRequest || !adapter.decodeCountTokens) return { input_tokens: estimate() };
    const upstreamModel = ch.modelMapping[body.model] ?? body.model;
    // The channel's header policy shapes what the upstream counts, so the cache key is taken after it.
    const p = applyHeaderPolicy(ch.headerPolicy, clientHeaders);
    const upstreamBody = applyBodyPolicy(ch.headerPolicy, body);
    const key = CountCache.key({ userId, channelId: ch.id, upstreamModel, beta: p.clientHeaders.get('anthropic-beta') ?? '', body: upstreamBody });
    const ask = async (): Promise<number | null> => {
      const u = adapter.buildCountTokensRequest!(upstreamBody,
        { baseUrl: ch.baseUrl, apiKey: ch.apiKey, extraHeaders: ch.headers, forwardedHeaders: p.forwarded, upstreamModel }, p.clientHeaders);
      const res = await fetch(u.url, { ...u.init, signal: AbortSignal.timeout(Math.min(ch.timeoutMs, 30_000)) });
      // A count is a few bytes: a bigger answer is not read (a hostile upstream could send gigabytes).
      const answer = res.ok ? await readBounded(res.body, { limit: COUNT_BODY_BYTES, deadline: Infinity }) : null;
      if (answer?.ok) return adapter.decodeCountTokens!(JSON.parse(Buffer.from(answer.bytes).toString('utf8')));
      res.body?.cancel().catch(() => {});
      // Counting is advisory: any failure falls back to the local estimate rather than fail the client.
      return null;
    };
    return { input_tokens: await this.counts.count(ch.id, key, ask, estimate) };
  }
}
