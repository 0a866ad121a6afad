/**
 * Native Anthropic upstream: the body passes through with only `model` replaced; unknown fields,
 * cache_control and betas survive. Responses echo the client's model name.
 */
import type { CountTokensRequest, MessagesRequest, Usage } from '@gw/formats';
import { zeroUsage } from '@gw/formats';
import type { DecodeContext, DecodedMessage, ProviderAdapter, UpstreamRequest, UpstreamTarget } from '../adapter';
import { badUpstreamResponse, classifyUpstreamError } from '../errors';
import { joinUrl } from '../url';
import { createAnthropicStreamDecoder } from './stream';
import { passMessageBytes } from './json-pass';

/** The only version with today's streaming format (named events, no [DONE]); the decoder relies on it. */
export const ANTHROPIC_VERSION = '2023-06-01';

function headers(target: UpstreamTarget, client: Headers): Record<string, string> {
  const h: Record<string, string> = {
    'content-type': 'application/json',
    'x-api-key': target.apiKey,
    'anthropic-version': ANTHROPIC_VERSION,
  };
  const beta = client.get('anthropic-beta'); // repeated headers arrive joined with ", "
  if (beta) h['anthropic-beta'] = beta;
  return { ...target.forwardedHeaders, ...h, ...target.extraHeaders };
}

function post(url: string, h: Record<string, string>, body: unknown): UpstreamRequest {
  return { url, init: { method: 'POST', headers: h, body: JSON.stringify(body), redirect: 'manual' } };
}

/**
 * The upstream's usage for billing. A main count (input, output) that is absent stays undefined: billed on the
 * estimate and flagged `estimated` (a 0 would bill it as free); present but not a number (or null): NaN, which
 * billing flags `invalid` and replaces. A missing or null cache count just means none.
 */
function normalizeUsage(u: unknown): Usage {
  const out = zeroUsage();
  if (u && typeof u === 'object') {
    for (const k of Object.keys(out) as Array<keyof Usage>) {
      const v = (u as Record<string, unknown>)[k];
      const main = k === 'input_tokens' || k === 'output_tokens';
      if (typeof v === 'number') out[k] = v;
      else if (v === undefined && main) (out as Record<string, unknown>)[k] = undefined;
      else if (v !== undefined && (v !== null || main)) out[k] = Number.NaN;
    }
    // The cache writes' TTL split (5 minutes / 1 hour) is billed at different prices.
    const split = (u as Record<string, unknown>).cache_creation;
    if (split !== undefined && split !== null) (out as Record<string, unknown>).cache_creation = split;
    // Server-tool counts: web searches are billed per search.
    const tools = (u as Record<string, unknown>).server_tool_use;
    if (tools !== undefined && tools !== null) (out as Record<string, unknown>).server_tool_use = tools;
  }
  return out;
}

export const anthropicAdapter: ProviderAdapter = {
  type: 'anthropic',

  buildMessagesRequest(body: MessagesRequest, target: UpstreamTarget, clientHeaders: Headers) {
    return post(joinUrl(target.baseUrl, '/v1/messages'), headers(target, clientHeaders), { ...body, model: target.upstreamModel });
  },

  decodeMessagesResponse(json: unknown, ctx: DecodeContext): DecodedMessage {
    const m = json as Record<string, any> | null;
    if (!m || typeof m !== 'object' || m.type !== 'message' || !Array.isArray(m.content)) throw badUpstreamResponse('not a message');
    const usage = m.usage && typeof m.usage === 'object' ? normalizeUsage(m.usage) : null;
    // Keep the upstream's extra usage fields (service_tier, cache_creation split) next to the normalized four.
    // The client sees a count for every field (0 for one the upstream left out, as before); billing sees the gaps.
    const shown = usage ? { ...usage, input_tokens: usage.input_tokens ?? 0, output_tokens: usage.output_tokens ?? 0 } : zeroUsage();
    const message = { ...m, model: ctx.requestedModel, usage: { ...(m.usage ?? {}), ...shown } };
    return { message: message as DecodedMessage['message'], usage };
  },

  passMessagesResponse: (bytes, requestedModel, countsCalls) => passMessageBytes(bytes, requestedModel, undefined, countsCalls),

  createStreamDecoder: createAnthropicStreamDecoder,

  classifyError: classifyUpstreamError,

  buildCountTokensRequest(body: CountTokensRequest, target: UpstreamTarget, clientHeaders: Headers) {
    return post(joinUrl(target.baseUrl, '/v1/messages/count_tokens'), headers(target, clientHeaders), { ...body, model: target.upstreamModel });
  },

  decodeCountTokens(json: unknown): number {
    const n = (json as { input_tokens?: unknown } | null)?.input_tokens;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) throw badUpstreamResponse('no input_tokens');
    return n;
  },
};
