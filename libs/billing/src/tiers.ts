/**
 * Which prices a request is billed at, the way Anthropic bills: cache writes priced by their TTL
 * (5 minutes or 1 hour), and an optional long-context tier whose prices apply to the WHOLE request
 * once its input (uncached + cache reads + cache writes) exceeds the model's threshold.
 */
import { PER_UNIT, RATIO_ONE, costOf, type CostPart } from '@gw/core';
import type { LongContextPrices, PriceRow } from '@gw/db';
import type { TokenUsage } from './usage';

/** One complete set of per-million prices. */
export interface PriceSet {
  input: number;
  output: number;
  cacheRead: number;
  /** 5-minute cache writes (and writes whose TTL was not reported). */
  cacheWrite: number;
  cacheWrite1h: number;
  audioInput: number;
  audioOutput: number;
}

/** A price as billing reads it: a PriceRow, or any object with at least the base prices (realtime, tests). */
export type BillablePrice = Pick<PriceRow, 'input' | 'output' | 'cacheRead' | 'cacheWrite' | 'audioInput' | 'audioOutput'>
  & Partial<Pick<PriceRow, 'cacheWrite1h' | 'longContextThreshold' | 'longContext' | 'webSearch' | 'codeExecution'>>;

/** Token counts a tier decision needs: the usage by kind (`cacheWrite` every write, `cacheWrite1h` the 1-hour part). */
export type TieredTokens = TokenUsage;

/** The long-context tier of `p`, when it has a complete one. */
export function longContextOf(p: BillablePrice): { threshold: number; prices: LongContextPrices } | null {
  const t = p.longContextThreshold;
  return typeof t === 'number' && t > 0 && p.longContext ? { threshold: t, prices: p.longContext } : null;
}

/** Input tokens that decide the tier: uncached + cache reads + cache writes (audio is not text context). */
export const tierInput = (u: Pick<TieredTokens, 'input' | 'cacheRead' | 'cacheWrite'>): number => u.input + u.cacheRead + u.cacheWrite;

/** The largest price the API takes and shows (a derived one above it would fail every price read's schema). */
const MAX_PRICE = 1_000_000_000_000;

/**
 * The 1-hour cache-write price of a set that names none: Anthropic bills 1-hour writes at 2× the input price
 * and 5-minute ones at 1.25×, so 8/5 of `cacheWrite` (rounded up). The 5-minute price itself let any client
 * that marks its prompt `cache_control: {ttl: "1h"}` be billed 1.25× for writes the operator paid 2× for.
 */
export const oneHourWrite = (cacheWrite: number): number => Math.min(MAX_PRICE, Math.ceil((cacheWrite * 8) / 5));

/**
 * The cache-write prices of a set: a write is never free. A price of 0 (a model priced with input and output only,
 * as most are set up) bills writes at the input price: the upstream processed them as input, and Anthropic reports
 * them outside `input_tokens`, so a client that marked each prompt `cache_control` had its whole input billed 0.
 */
function writePrices(s: { input: number; cacheWrite: number; cacheWrite1h?: number | null }): { cacheWrite: number; cacheWrite1h: number } {
  return {
    cacheWrite: s.cacheWrite || s.input,
    cacheWrite1h: s.cacheWrite1h || (s.cacheWrite ? oneHourWrite(s.cacheWrite) : s.input),
  };
}

/** The prices that apply to a request with `inputTokens` of input (tierInput), and whether that is the long-context tier. */
export function priceSetFor(p: BillablePrice, inputTokens: number): { set: PriceSet; longContext: boolean } {
  const base: PriceSet = {
    input: p.input, output: p.output, cacheRead: p.cacheRead, ...writePrices(p),
    // Audio is never free either: a realtime model priced without audio prices bills audio at the text prices.
    audioInput: p.audioInput || p.input, audioOutput: p.audioOutput || p.output,
  };
  const lc = longContextOf(p);
  if (!lc || inputTokens <= lc.threshold) return { set: base, longContext: false };
  return { set: { ...base, ...lc.prices, ...writePrices(lc.prices) }, longContext: true };
}

/**
 * Exact cost in quota units of `u` at `p`: every kind at its tier's price, plus `u.webSearch` searches at
 * `searchPrice` quota units each (the price row's `web_search`, or the default the caller resolved; the
 * long-context tier does not change it) and `u.codeExecution` calls at the row's `code_execution` (unset: 0, such requests
 * are refused before they are sent), rounded up once over all kinds (the group's per-mille `ratio`
 * folded into that one rounding); never throws, whatever the counts. `cacheWrite1h` is taken out of `cacheWrite` (at most all of it).
 * `samplingInput`: the tier is chosen by at most this much input (UsageLimits.samplingInput).
 */
export function priceUsage(u: TieredTokens, p: BillablePrice | undefined, ratio: number = RATIO_ONE, searchPrice: number = p?.webSearch ?? 0,
  samplingInput = Number.POSITIVE_INFINITY): { cost: number; longContext: boolean } {
  if (!p) return { cost: 0, longContext: false };
  const { set, longContext } = priceSetFor(p, Math.min(tierInput(u), samplingInput));
  const oneHour = Math.min(u.cacheWrite1h ?? 0, u.cacheWrite);
  const parts = USAGE_PARTS;
  setPart(parts, 0, u.input, set.input);
  setPart(parts, 1, u.output, set.output);
  setPart(parts, 2, u.cacheRead, set.cacheRead);
  setPart(parts, 3, u.cacheWrite - oneHour, set.cacheWrite);
  setPart(parts, 4, oneHour, set.cacheWrite1h);
  setPart(parts, 5, u.audioInput ?? 0, set.audioInput);
  setPart(parts, 6, u.audioOutput ?? 0, set.audioOutput);
  setPart(parts, 7, u.webSearch ?? 0, searchPrice);
  setPart(parts, 8, u.codeExecution ?? 0, codeExecutionPrice(p));
  return { cost: costOf(parts, ratio), longContext };
}

/**
 * priceUsage's parts (the last two per unit), filled in place on every call: costOf is synchronous and keeps none of
 * them, and ten fresh arrays per settlement were most of its pricing's garbage.
 */
const USAGE_PARTS: CostPart[] = [[0, 0], [0, 0], [0, 0], [0, 0], [0, 0], [0, 0], [0, 0], [0, 0, PER_UNIT], [0, 0, PER_UNIT]];

/** Sets part `i` of a reused parts list (its per-unit mark, if any, stays). */
export function setPart(parts: CostPart[], i: number, count: number, price: number): void {
  const part = parts[i]!;
  part[0] = count;
  part[1] = price;
}

/** Quota units per code-execution call at `p`: its `code_execution`, 0 when unset or unusable (such a request is refused before it is sent). */
export function codeExecutionPrice(p: { codeExecution?: number | null } | undefined): number {
  const c = p?.codeExecution;
  return typeof c === 'number' && Number.isSafeInteger(c) && c >= 0 ? c : 0;
}
