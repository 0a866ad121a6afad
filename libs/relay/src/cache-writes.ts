/**
 * The cache writes an Anthropic usage bills. Its `cache_creation_input_tokens` is every write; `cache_creation` splits
 * them by TTL (`ephemeral_5m_input_tokens`, `ephemeral_1h_input_tokens`). An upstream (or a proxy rebuilding the
 * usage) that gives the split but leaves the total out, or sends it as 0, had its writes billed as none: 11 tokens
 * billed for an answer that wrote 3,600 to the cache. Then the writes are the sum of the split's usable parts. A
 * total that is present and above 0 stands as it is (the split's 1-hour part is clamped to it by guardUsage).
 */
import type { Usage } from '@gw/formats';

const usable = (n: unknown): n is number => typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;

/** The TTL split's usable parts summed, or undefined when there is no split with a part above 0. */
export function splitWrites(u: Usage | null | undefined): number | undefined {
  const split = (u as { cache_creation?: unknown } | null | undefined)?.cache_creation;
  if (!split || typeof split !== 'object') return undefined;
  const s = split as { ephemeral_5m_input_tokens?: unknown; ephemeral_1h_input_tokens?: unknown };
  const sum = (usable(s.ephemeral_5m_input_tokens) ? s.ephemeral_5m_input_tokens : 0) + (usable(s.ephemeral_1h_input_tokens) ? s.ephemeral_1h_input_tokens : 0);
  return sum > 0 && Number.isSafeInteger(sum) ? sum : undefined;
}

/** The cache-write count to bill (see the module comment): the reported total unless it is absent, null or 0 beside a split. */
export function cacheWritesOf(u: Usage | null | undefined): unknown {
  const total = u?.cache_creation_input_tokens;
  if (total !== undefined && total !== null && total !== 0) return total;
  return splitWrites(u) ?? total;
}
