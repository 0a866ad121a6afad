/**
 * Anthropic's server-side compaction (`context_management.edits` with `{type: "compact_20260112", …}`, beta
 * `compact-2026-01-12`) adds a sampling step that reads the whole conversation and writes a summary. Anthropic
 * bills that step but reports it only in `usage.iterations`, outside the top-level counts every bound and
 * settlement here reads, and a request may compact more than once (at each server-tool iteration). So it is
 * refused before anything is held or sent, whatever channel would serve it (a failover may land on any).
 */
import { errors } from '@gw/core';

/** Every version, in any case or spacing an Anthropic-compatible upstream might still accept. */
const COMPACT_EDIT = /^\s*compact/i;

/** Throws the client's 400 when `body` asks for server-side compaction. */
export function refuseCompaction(body: object): void {
  const edits = ((body as { context_management?: unknown }).context_management as { edits?: unknown } | null | undefined)?.edits;
  if (!Array.isArray(edits)) return;
  edits.forEach((e, i) => {
    const type = e && typeof e === 'object' ? (e as { type?: unknown }).type : undefined;
    if (typeof type === 'string' && COMPACT_EDIT.test(type)) {
      throw errors.badRequest('invalid_request_error',
        'Server-side compaction is not supported: its usage is not in the counts this gateway bills. Compact the conversation client-side.',
        `context_management.edits.${i}`);
    }
  });
}
