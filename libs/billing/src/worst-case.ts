/**
 * Sizing reservations: the most a request can cost given what the gateway knows before sending it.
 */
import { PER_UNIT, RATIO_ONE, costOf, type CostPart } from '@gw/core';
import { codeExecutionPrice, priceSetFor, setPart, type BillablePrice } from './tiers';
import type { UsageLimits } from './usage-guard';

type Price = BillablePrice & { contextWindow?: number | null };

/** The model's context window: its price row's `context_window`, else the configured default. */
export function contextWindowOf(price: { contextWindow?: number | null } | undefined, defaultTokens: number): number {
  const c = price?.contextWindow;
  return typeof c === 'number' && Number.isSafeInteger(c) && c > 0 ? c : defaultTokens;
}

/**
 * Limits of one request: input is the measured bound (or the whole context window when some input
 * cannot be measured: a URL or file source, a large base64 document, a server tool), never more than
 * the context window; output is the request's max output tokens.
 */
export function usageLimits(input: { tokens: number; unmeasured: boolean }, maxOutput: number, contextWindow: number): UsageLimits {
  const bound = input.unmeasured ? contextWindow : Math.min(contextWindow, Math.max(0, Math.ceil(input.tokens)));
  return { maxInput: contextWindow, maxOutput: Math.max(0, Math.floor(maxOutput)), input: bound };
}

/**
 * Worst-case cost: the input bound at the dearest input price plus max output at the dearest output price,
 * in the tier the input bound falls into (the long-context tier once the bound exceeds its threshold), plus
 * the most web searches the request may make (`maxWebSearch`, Σ of its web-search tools' max_uses) at
 * `searchPrice` each, plus the most code-execution calls it may be billed (`maxCodeExecution`, CODE_EXECUTION_MAX_CALLS
 * with a code-execution tool) at the row's `code_execution` each, times the group's ratio like the final cost, so the reservation covers the charge.
 */
export function worstCaseCost(l: UsageLimits, price: Price | undefined, ratio: number = RATIO_ONE, searchPrice: number = price?.webSearch ?? 0): number {
  if (!price) return 0;
  const { set } = priceSetFor(price, l.input);
  const dearIn = Math.max(set.input, set.cacheRead, set.cacheWrite, set.cacheWrite1h, set.audioInput);
  const dearOut = Math.max(set.output, set.audioOutput);
  const parts = WORST_PARTS;
  setPart(parts, 0, l.input, dearIn);
  setPart(parts, 1, l.maxOutput, dearOut);
  setPart(parts, 2, l.maxWebSearch ?? 0, searchPrice);
  setPart(parts, 3, l.maxCodeExecution ?? 0, codeExecutionPrice(price));
  return costOf(parts, ratio);
}

/** worstCaseCost's parts, filled in place on every call (see priceUsage's). */
const WORST_PARTS: CostPart[] = [[0, 0], [0, 0], [0, 0, PER_UNIT], [0, 0, PER_UNIT]];
