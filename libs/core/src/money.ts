/**
 * Money and quota are integers of "quota units" end to end; no floats touch a balance.
 * Prices are stored in quota units per million tokens, so cost = ceil(sum(tokens * price) / 1e6).
 * BigInt keeps the multiplication exact for any realistic token count.
 */
export const TOKENS_PER_PRICE_UNIT = 1_000_000n;

/**
 * A count as money arithmetic accepts it: a non-negative safe integer. Anything else (NaN, ±Infinity,
 * fractions, negatives, non-numbers) is clamped, never thrown on: callers validate first, this only keeps
 * arithmetic total so a hostile number can never turn a served request into an exception.
 */
export function safeCount(v: unknown): number {
  if (typeof v !== 'number' || Number.isNaN(v) || v <= 0) return 0;
  if (v >= Number.MAX_SAFE_INTEGER) return Number.MAX_SAFE_INTEGER;
  return Math.ceil(v);
}

/** Exact cost in quota units of `tokens` at `pricePerMillion`, rounded up (never undercharge); never throws. */
export function costOf(parts: Array<[tokens: number, pricePerMillion: number]>): number {
  let micro = 0n;
  for (const [tokens, price] of parts) micro += BigInt(safeCount(tokens)) * BigInt(safeCount(price));
  const units = (micro + TOKENS_PER_PRICE_UNIT - 1n) / TOKENS_PER_PRICE_UNIT;
  return units > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(units);
}
