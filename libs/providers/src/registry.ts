/** Adapters by channel type. The relay looks an adapter up by the channel's `type` and nothing else. */
import { GatewayError } from '@gw/core';
import type { ProviderAdapter } from './adapter';
import { anthropicAdapter } from './anthropic/adapter';
import { openaiAdapter, openaiLegacyAdapter } from './openai/adapter';

const adapters = new Map<string, ProviderAdapter>();

/** Adds (or replaces) an adapter, e.g. a configured OpenAI-compatible variant. */
export function registerAdapter(adapter: ProviderAdapter): void {
  adapters.set(adapter.type, adapter);
}

for (const a of [anthropicAdapter, openaiAdapter, openaiLegacyAdapter]) registerAdapter(a);

/** The adapter of a channel type. An unknown type is a configuration error: 500 `unknown_channel_type`. */
export function getAdapter(type: string): ProviderAdapter {
  const a = adapters.get(type);
  if (!a) throw new GatewayError(500, 'unknown_channel_type', `No adapter for channel type "${type}".`);
  return a;
}

/** Whether a channel type has an adapter (for validating channel configuration). */
export function hasAdapter(type: string): boolean {
  return adapters.has(type);
}

/** All registered channel types. */
export function adapterTypes(): string[] {
  return [...adapters.keys()];
}
