/**
 * Upstream addressing through the provider adapters: a channel can carry a realtime session when
 * its adapter has `realtimeUrl` (OpenAI-compatible types); the adapter builds the URL and headers.
 */
import type { ProviderAdapter } from '@gw/providers';
import type { RealtimeChannel, UpstreamResolver } from './ports';

/** Builds the resolver from the adapter registry (`getAdapter` of @gw/providers). */
export function adapterResolver(adapterOf: (type: string) => ProviderAdapter): UpstreamResolver {
  const adapter = (c: RealtimeChannel): ProviderAdapter | undefined => {
    try {
      return adapterOf(c.type);
    } catch {
      return undefined; // unknown type: not a realtime channel
    }
  };
  const target = (c: RealtimeChannel, upstreamModel: string) => ({ baseUrl: c.baseUrl, apiKey: c.apiKey, upstreamModel, extraHeaders: c.headers });
  return {
    supports: (c) => typeof adapter(c)?.realtimeUrl === 'function',
    url: (c, m) => adapter(c)!.realtimeUrl!(target(c, m)),
    headers: (c, m) => adapter(c)!.realtimeHeaders?.(target(c, m)) ?? {},
  };
}
