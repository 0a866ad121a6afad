/**
 * Default upstream addressing for OpenAI-compatible channels, used unless the provider adapters
 * offer their own `realtimeUrl`/`realtimeHeaders`.
 */
import type { RealtimeChannel, UpstreamResolver } from './ports';

/** `https://host[:port][/prefix]` → `wss://host[:port][/prefix]/v1/realtime?model=<model>`. */
export function realtimeUrlOf(baseUrl: string, upstreamModel: string): string {
  const u = new URL(baseUrl);
  u.protocol = u.protocol === 'https:' || u.protocol === 'wss:' ? 'wss:' : 'ws:';
  u.pathname = `${u.pathname.replace(/\/+$/, '').replace(/\/v1$/, '')}/v1/realtime`;
  u.search = '';
  u.searchParams.set('model', upstreamModel);
  return u.toString();
}

/** Resolver for channels of type `openai` (base URL + Bearer channel key + channel extra headers). */
export const openAiRealtimeResolver: UpstreamResolver = {
  supports: (c: RealtimeChannel) => c.type === 'openai',
  url: (c, model) => realtimeUrlOf(c.baseUrl, model),
  headers: (c) => ({ ...c.headers, authorization: `Bearer ${c.apiKey}` }),
};
