/**
 * Work Anthropic bills inside one request but reports only in `usage.iterations`, outside the top-level counts
 * every bound and settlement here reads:
 * - server-side compaction (`context_management.edits` with `{type: "compact_20260112", …}`, beta
 *   `compact-2026-01-12`): a sampling step that reads the whole conversation and writes a summary, possibly more
 *   than once a request (at each server-tool iteration);
 * - the advisor tool (`{type: "advisor_20260301", name: "advisor", model: "claude-opus-…"}`, beta
 *   `advisor-tool-2026-03-01`): each call runs the tool's (dearer) model over the whole transcript, at that
 *   model's prices.
 * Neither can be bounded or priced from what the gateway reads, so a request asking for either is refused before
 * anything is held or sent, whatever channel would serve it (a failover may land on any).
 */
import { GatewayError } from '@gw/core';

/** Every version, in any case or spacing an Anthropic-compatible upstream might still accept. */
const COMPACT_EDIT = /^\s*compact/i;
const ADVISOR_TOOL = /^\s*advisor/i;

const typeOf = (x: unknown): string | undefined => {
  const t = x && typeof x === 'object' ? (x as { type?: unknown }).type : undefined;
  return typeof t === 'string' ? t : undefined;
};

/** Throws the client's 400 when `body` asks for work billed outside the usage counts. */
export function refuseUnmeteredIterations(body: object): void {
  const b = body as { context_management?: { edits?: unknown } | null; tools?: unknown };
  const edits = b.context_management?.edits;
  if (Array.isArray(edits)) {
    edits.forEach((e, i) => {
      if (COMPACT_EDIT.test(typeOf(e) ?? '')) {
        throw new GatewayError(400, 'invalid_request_error',
          'Server-side compaction is not supported: Anthropic bills it outside the usage counts this gateway bills. Compact the conversation client-side.',
          { param: `context_management.edits.${i}` });
      }
    });
  }
  if (Array.isArray(b.tools)) {
    b.tools.forEach((t, i) => {
      const type = typeOf(t);
      if (type !== undefined && ADVISOR_TOOL.test(type)) {
        throw new GatewayError(400, 'unsupported_tool',
          `Tool type "${type}" is not supported: its model's usage is billed outside the usage counts this gateway bills.`, { param: `tools.${i}` });
      }
    });
  }
}
