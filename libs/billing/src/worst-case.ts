/**
 * Sizing reservations: the most a request can cost given what the gateway knows before sending it.
 */
import type { PriceRow } from '@gw/db';
import { costFor } from './usage';
import type { UsageLimits } from './usage-guard';

type Price = Pick<PriceRow, 'input' | 'output' | 'cacheRead' | 'cacheWrite' | 'audioInput' | 'audioOutput'> & { contextWindow?: number | null };

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

/** Worst-case cost: the input bound at the dearest input price plus max output at the dearest output price. */
export function worstCaseCost(l: UsageLimits, price: Price | undefined): number {
  if (!price) return 0;
  const dearIn = Math.max(price.input, price.cacheRead, price.cacheWrite, price.audioInput);
  const dearOut = Math.max(price.output, price.audioOutput);
  return costFor({ input: l.input, output: l.maxOutput, cacheRead: 0, cacheWrite: 0 },
    { input: dearIn, output: dearOut, cacheRead: 0, cacheWrite: 0, audioInput: 0, audioOutput: 0 });
}
