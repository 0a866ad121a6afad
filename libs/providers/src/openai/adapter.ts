/**
 * OpenAI Chat Completions upstreams. `createOpenAICompatibleAdapter` is the base; a compatible variant
 * (another token field, another auth header, no realtime) is a configuration of it, not a new adapter.
 */
import { MAX_STREAM_TOOL_CALLS, firstChoice, fromOpenAICompletion, toOpenAIRequest, type ChatCompletion, type MessagesRequest, type ToOpenAIOptions } from '@gw/formats';
import { GatewayError } from '@gw/core';
import type { DecodeContext, DecodedMessage, ProviderAdapter, UpstreamTarget } from '../adapter';
import { badUpstreamResponse, classifyUpstreamError } from '../errors';
import { echoesReasoning } from '../reasoning-echo';
import { joinUrl, toWebSocketUrl } from '../url';
import { createOpenAIStreamDecoder } from './stream';

export interface OpenAICompatibleConfig {
  /** Channel type served. */
  type: string;
  /** Path of chat completions. Default `/v1/chat/completions`. */
  chatPath?: string;
  /** Request translation options (max tokens field, user field, system role). */
  request?: Omit<ToOpenAIOptions, 'model'>;
  /** Auth headers for a key. Default `Authorization: Bearer <key>`. */
  authHeaders?: (apiKey: string) => Record<string, string>;
  /** Realtime WebSocket path, or null when the upstream has none. Default `/v1/realtime`. */
  realtimePath?: string | null;
}

const bearer = (apiKey: string) => ({ authorization: `Bearer ${apiKey}` });

export function createOpenAICompatibleAdapter(config: OpenAICompatibleConfig): ProviderAdapter {
  const chatPath = config.chatPath ?? '/v1/chat/completions';
  const auth = config.authHeaders ?? bearer;
  const realtimePath = config.realtimePath === undefined ? '/v1/realtime' : config.realtimePath;

  const adapter: ProviderAdapter = {
    type: config.type,

    buildMessagesRequest(body: MessagesRequest, target: UpstreamTarget) {
      const payload = toOpenAIRequest(body, { ...config.request, model: target.upstreamModel, reasoningEcho: echoesReasoning(target.reasoningEcho, target.baseUrl),
        includeUsage: target.streamUsage !== false, allowPrivateMediaUrls: target.allowPrivateMediaUrls === true });
      const headers = { ...target.forwardedHeaders, 'content-type': 'application/json', ...auth(target.apiKey), ...target.extraHeaders };
      return { url: joinUrl(target.baseUrl, chatPath), init: { method: 'POST', headers, body: JSON.stringify(payload), redirect: 'manual' } };
    },

    decodeMessagesResponse(json: unknown, ctx: DecodeContext): DecodedMessage {
      const c = json as ChatCompletion | null;
      if (!c || typeof c !== 'object' || !Array.isArray(c.choices) || !firstChoice(c.choices)?.message) throw badUpstreamResponse('not a chat completion');
      // As many tool calls as a stream may relay, no more: each becomes a block several times its size in the
      // answer (32 MiB of `{}` calls made a 170 MB answer and seconds of the event loop).
      // A choice finishing with "error" (OpenRouter's when its provider fails mid-answer) is a cut answer, as in a stream:
      // decoded, it reached the client as a whole end_turn answer, billed, with no failover.
      if ((firstChoice(c.choices)!.finish_reason as string | null) === 'error') throw new GatewayError(502, 'upstream_error', 'The upstream failed while answering.');
      const calls = firstChoice(c.choices)!.message.tool_calls;
      if (Array.isArray(calls) && calls.length > MAX_STREAM_TOOL_CALLS) throw badUpstreamResponse('too many tool calls');
      const { message, usage, estimatedUsage } = fromOpenAICompletion(c, {
        requestedModel: ctx.requestedModel, stopSequences: ctx.stopSequences, id: ctx.messageId, toolNames: ctx.toolNames, inputTokens: ctx.inputTokens,
      });
      return { message, usage, estimatedUsage };
    },

    createStreamDecoder: createOpenAIStreamDecoder,

    classifyError: classifyUpstreamError,
  };

  if (realtimePath !== null) {
    adapter.realtimeUrl = (target) => {
      const url = new URL(toWebSocketUrl(joinUrl(target.baseUrl, realtimePath)));
      url.searchParams.set('model', target.upstreamModel);
      return url.toString();
    };
    adapter.realtimeHeaders = (target) => ({ ...auth(target.apiKey), ...target.extraHeaders });
  }
  return adapter;
}

/** api.openai.com and faithful compatibles: `max_completion_tokens`, Bearer auth, realtime, `reasoning_effort`. */
export const openaiAdapter = createOpenAICompatibleAdapter({ type: 'openai', request: { reasoningEffort: true } });

/**
 * Older compatible servers (vLLM < 0.6, many self-hosted) that only know `max_tokens`, have no realtime,
 * and may refuse an unknown `reasoning_effort` (thinking is dropped for them).
 */
export const openaiLegacyAdapter = createOpenAICompatibleAdapter({
  type: 'openai-legacy',
  request: { maxTokensField: 'max_tokens' },
  realtimePath: null,
});
