/**
 * Anthropic's code-execution server tool (`{type:"code_execution_20250825", name:"code_execution"}`, the older
 * `code_execution_20250522`) runs in a container Anthropic bills by container time on the operator's account,
 * on top of tokens. The gateway cannot see that time, so it bills each call (a server_tool_use block named
 * code_execution, bash_code_execution or text_editor_code_execution, counted in the answer) at the price's
 * `code_execution`: a model whose price has none is refused the tool before anything is sent, and the
 * reservation covers CODE_EXECUTION_MAX_CALLS calls (a counted number above it is clamped at settlement).
 */
import { GatewayError } from '@gw/core';
import type { MessagesRequest } from '@gw/formats';
import { serverToolMatcher } from './web-search';

/**
 * Every version of the code-execution tool, in any case or spacing an Anthropic-compatible upstream might still
 * accept (like the web-search matcher): one the gateway missed would run unpriced and unbounded.
 */
const CODE_EXECUTION_TYPE = /^\s*code_execution/i;

export const isCodeExecutionTool = serverToolMatcher(CODE_EXECUTION_TYPE);

/** The index of `body`'s first code-execution tool, or -1. */
export function codeExecutionToolAt(body: Pick<MessagesRequest, 'tools'>): number {
  const tools = body.tools;
  return Array.isArray(tools) ? tools.findIndex(isCodeExecutionTool) : -1;
}

/** Whether a price can bill code-execution calls: none at all (a free model) or a usable `code_execution`. */
const prices = (price: { codeExecution?: number | null } | undefined): boolean => {
  const c = price?.codeExecution;
  return !price || (typeof c === 'number' && Number.isSafeInteger(c) && c >= 0);
};

/**
 * Throws 403 `tool_not_priced` (param `tools.<i>`) when `body` has a code-execution tool and `price` (the price
 * that bills it) sets no `code_execution`; a model without any price (BILLING_REQUIRE_PRICE=false) is free.
 */
export function requireCodeExecutionPrice(body: Pick<MessagesRequest, 'tools'>, price: { codeExecution?: number | null } | undefined, billedModel: string): void {
  if (prices(price)) return;
  const i = codeExecutionToolAt(body);
  if (i < 0) return;
  throw new GatewayError(403, 'tool_not_priced',
    `Code execution has no price configured for model ${billedModel}; an administrator must set its code_execution price before the tool can be used`,
    { param: `tools.${i}` });
}
