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

/** A price ratio in per-mille: 1000 = ×1. */
export const RATIO_ONE = 1000;

/**
 * Exact cost in quota units of `tokens` at `pricePerMillion`, times `ratio`/1000, rounded up once (never
 * undercharge; the ratio is folded into the same single rounding, so ×1.5 of a cost is exactly
 * ceil(Σ tokens × price × 1500 / 10⁹)); never throws.
 */
export function costOf(parts: Array<[tokens: number, pricePerMillion: number]>, ratio: number = RATIO_ONE): number {
  // Exact in plain numbers while every intermediate stays a safe integer (every real request: BigInt cost
  // more than the rest of pricing); otherwise the same arithmetic in BigInt.
  let micro = 0;
  for (const [tokens, price] of parts) micro += safeCount(tokens) * safeCount(price);
  const scaled = micro * safeCount(ratio);
  if (Number.isSafeInteger(micro) && Number.isSafeInteger(scaled)) {
    // Integer ceiling division with the quotient corrected by its exact remainder (n / d alone can round up).
    let q = Math.floor(scaled / MICRO_PER_UNIT);
    let r = scaled - q * MICRO_PER_UNIT;
    if (r < 0) { q--; r += MICRO_PER_UNIT; } else if (r >= MICRO_PER_UNIT) { q++; r -= MICRO_PER_UNIT; }
    return r > 0 ? q + 1 : q;
  }
  return costOfBig(parts, ratio);
}

const MICRO_PER_UNIT = Number(TOKENS_PER_PRICE_UNIT) * RATIO_ONE;

/** costOf in BigInt throughout (exported for the equivalence test). */
export function costOfBig(parts: Array<[tokens: number, pricePerMillion: number]>, ratio: number = RATIO_ONE): number {
  let micro = 0n;
  for (const [tokens, price] of parts) micro += BigInt(safeCount(tokens)) * BigInt(safeCount(price));
  const divisor = TOKENS_PER_PRICE_UNIT * BigInt(RATIO_ONE);
  const units = (micro * BigInt(safeCount(ratio)) + divisor - 1n) / divisor;
  return units > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(units);
}
