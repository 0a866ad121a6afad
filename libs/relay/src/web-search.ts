/**
 * Anthropic's web-search server tool (`{type:"web_search_20250305", name:"web_search", max_uses?}`) is billed
 * per search on top of tokens. Its `max_uses` is the only bound on how many searches one request can make,
 * so the gateway caps it before sending (WEB_SEARCH_MAX_USES): the reservation then covers the worst case,
 * and a reported count above the bound is clamped at settlement.
 */
import { errors } from '@gw/core';
import type { MessagesRequest } from '@gw/formats';

/**
 * Every version of the web-search tool (`web_search_20250305`, later ones), in any case or spacing an
 * Anthropic-compatible upstream might still accept: one the cap missed would search unbounded and unbilled
 * (a count is clamped to the bound, 0 without a recognised tool).
 */
const WEB_SEARCH_TYPE = /^\s*web_search/i;

type AnyTool = { type?: unknown; max_uses?: unknown };

/** A matcher of the server tools whose `type` matches `re` (shared by every billed server tool). */
export const serverToolMatcher = (re: RegExp) => (t: unknown): boolean =>
  !!t && typeof t === 'object' && typeof (t as AnyTool).type === 'string' && re.test((t as AnyTool).type as string);

export const isWebSearchTool = serverToolMatcher(WEB_SEARCH_TYPE);

/** A client's max_uses is kept when it is an integer from 1 to `cap`; an absent (or null) or larger one becomes `cap`. */
const keeps = (v: unknown, cap: number): boolean => typeof v === 'number' && Number.isSafeInteger(v) && v >= 1 && v <= cap;

/**
 * `body` with every web-search tool's `max_uses` capped at `cap` (a missing one set to it); the same object
 * when nothing needed changing, so the common request costs no copy. A max_uses that is present but not a
 * positive integer is the client's 400: raising it to the cap would turn a request the upstream refuses
 * into a billable one allowing more searches than asked.
 */
export function capWebSearch<B extends Pick<MessagesRequest, 'tools'>>(body: B, cap: number): B {
  const tools = body.tools;
  if (!Array.isArray(tools)) return body;
  tools.forEach((t, i) => {
    const v = isWebSearchTool(t) ? (t as AnyTool).max_uses : undefined;
    if (v !== undefined && v !== null && !(typeof v === 'number' && Number.isSafeInteger(v) && v >= 1)) {
      throw errors.badRequest('invalid_request_error', 'max_uses must be a positive integer', `tools.${i}.max_uses`);
    }
  });
  if (!tools.some((t) => isWebSearchTool(t) && !keeps((t as AnyTool).max_uses, cap))) return body;
  return { ...body, tools: tools.map((t) => (isWebSearchTool(t) && !keeps((t as AnyTool).max_uses, cap) ? { ...t, max_uses: cap } : t)) };
}

/** The most web searches `body` allows: the sum of its web-search tools' max_uses (`cap` for one not yet capped). */
export function webSearchBound(body: Pick<MessagesRequest, 'tools'>, cap: number): number {
  const tools = body.tools;
  if (!Array.isArray(tools)) return 0;
  let n = 0;
  for (const t of tools) if (isWebSearchTool(t)) n += keeps((t as AnyTool).max_uses, cap) ? (t as AnyTool).max_uses as number : cap;
  return n;
}
