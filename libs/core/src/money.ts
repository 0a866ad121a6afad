/**
 * Money and quota are integers of "quota units" end to end; no floats touch a balance.
 * Prices are stored in quota units per million tokens, so cost = ceil(sum(tokens * price) / 1e6).
 * BigInt keeps the multiplication exact for any realistic token count.
 */
export const TOKENS_PER_PRICE_UNIT = 1_000_000n;

/** Exact cost in quota units of `tokens` at `pricePerMillion`, rounded up (never undercharge). */
export function costOf(parts: Array<[tokens: number, pricePerMillion: number]>): number {
  let micro = 0n;
  for (const [tokens, price] of parts) micro += BigInt(Math.max(0, tokens)) * BigInt(Math.max(0, price));
  return Number((micro + TOKENS_PER_PRICE_UNIT - 1n) / TOKENS_PER_PRICE_UNIT);
}
