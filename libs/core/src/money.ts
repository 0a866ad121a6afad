/**
 * Money and quota are integers of "quota units" end to end; no floats touch a balance.
 * Prices are stored in quota units per million tokens, so cost = ceil(sum(tokens * price) / 1e6).
 * BigInt keeps the multiplication exact for any realistic token count.
 */
import { GatewayError } from './errors';

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
 * One priced quantity: `[tokens, pricePerMillion]`, or `[count, pricePerUnit, PER_UNIT]` for things billed
 * per unit (a web search), which is the same as count × 10⁶ tokens at that price, exactly.
 */
export type CostPart = [tokens: number, pricePerMillion: number] | [count: number, pricePerUnit: number, perUnit: typeof PER_UNIT];

/** Marks a CostPart priced per unit rather than per million. */
export const PER_UNIT = 'unit' as const;

/**
 * Exact cost in quota units of `tokens` at `pricePerMillion` (and of per-unit parts at their unit price),
 * times `ratio`/1000, rounded up once (never undercharge; the ratio is folded into the same single
 * rounding, so ×1.5 of a cost is exactly ceil(Σ tokens × price × 1500 / 10⁹)); never throws.
 */
export function costOf(parts: CostPart[], ratio: number = RATIO_ONE): number {
  // Exact in plain numbers while every intermediate stays a safe integer (every real request: BigInt cost
  // more than the rest of pricing); otherwise the same arithmetic in BigInt.
  let micro = 0;
  for (const [tokens, price, unit] of parts) micro += safeCount(tokens) * safeCount(price) * (unit === PER_UNIT ? PRICE_UNIT : 1);
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
const PRICE_UNIT = Number(TOKENS_PER_PRICE_UNIT);

/** costOf in BigInt throughout (exported for the equivalence test). */
export function costOfBig(parts: CostPart[], ratio: number = RATIO_ONE): number {
  let micro = 0n;
  for (const [tokens, price, unit] of parts) micro += BigInt(safeCount(tokens)) * BigInt(safeCount(price)) * (unit === PER_UNIT ? TOKENS_PER_PRICE_UNIT : 1n);
  const divisor = TOKENS_PER_PRICE_UNIT * BigInt(RATIO_ONE);
  const units = (micro * BigInt(safeCount(ratio)) + divisor - 1n) / divisor;
  return units > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(units);
}

/**
 * The most a balance may hold, in quota units: 4 × 10¹⁵ (at the default QUOTA_PER_UNIT of 5000 per cent,
 * $8 billion). Quotas are JS numbers, exact only up to 2^53 − 1 ≈ 9.007 × 10¹⁵; a balance beyond that rounds
 * silently (a charge of 1 unit vanishes, balance ≠ Σ ledger). The bound is four single credits of the largest
 * size (an adjustment, an opening balance or a redemption code is at most 10¹⁵) and leaves room below 2^53 for
 * one more such credit or for the same amount held or debited, so every sum or difference the gateway forms of
 * a balance and one change (in JS, in Redis's Lua doubles) stays exact. No credit may take a balance above it
 * (checked inside the ledger write, under the row's lock), and an admin's debit may not take one below its
 * negative.
 */
export const MAX_BALANCE = 4_000_000_000_000_000;

/**
 * The largest value of an accumulating counter (a user's or key's used_quota, request_count): they are summed
 * in SQL and read as JS numbers, so they stop at 2^53 − 1 instead of growing into values a reader would round.
 */
export const MAX_COUNTER = Number.MAX_SAFE_INTEGER;

/**
 * The answer to a change that would take a balance out of [−MAX_BALANCE, MAX_BALANCE] (nothing is written):
 * a credit above the bound, or an admin's debit below its negative.
 */
export function balanceLimitError(change: 'credit' | 'debit' = 'credit'): GatewayError {
  const where = change === 'credit' ? `above ${MAX_BALANCE}` : `below -${MAX_BALANCE}`;
  return new GatewayError(409, 'balance_limit',
    `This ${change} would take the balance ${where} quota units, past the most a balance may hold (MAX_BALANCE, ${MAX_BALANCE}); nothing was changed`,
    { param: 'amount' });
}

/** True for balanceLimitError's errors, wherever they were thrown. */
export function isBalanceLimit(err: unknown): err is GatewayError {
  return err instanceof GatewayError && err.code === 'balance_limit';
}

/**
 * The answer to a request of a user whose balance (or a limited key whose remain_quota) was read from the
 * database beyond ±(2^53 − 1): the number read is already rounded, so nothing is admitted on it (a refusal,
 * never a guess). 402 like the other money refusals, so clients do not retry it; only an operator's fix of
 * the row (then any change to the user or key, or a restart) makes it usable again.
 */
export function inexactBalanceError(scope: 'user' | 'key'): GatewayError {
  const what = scope === 'user' ? "This account's balance" : "This API key's remain_quota";
  return new GatewayError(402, 'balance_inexact',
    `${what} in the database is beyond 2^53 - 1 (${Number.MAX_SAFE_INTEGER}) quota units, where it cannot be read exactly; nothing is admitted on it until an operator corrects it`);
}

/**
 * The names among `fields` whose value is not a safe integer: a money or counter column read beyond
 * ±(2^53 − 1), which the database driver has already rounded. Management views list them (`inexact`) so the
 * number shown is never taken for the stored one; undefined when there are none (the usual case).
 */
export function inexactFields(fields: Record<string, number>): string[] | undefined {
  let out: string[] | undefined;
  for (const k in fields) if (!Number.isSafeInteger(fields[k])) (out ??= []).push(k);
  return out;
}
