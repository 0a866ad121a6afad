/**
 * Whose 404 an upstream's is. Routing matches the model name exactly, so the model an upstream is asked for is always
 * one the operator listed or mapped: its "model not found" is the channel's (a typo in `models` or `model_mapping`),
 * and so is a 404 for the path (a wrong base_url). Those stay channel faults (failover, health). What the client alone
 * chooses and an upstream looks up is an object named by id: a `file` source, a `container_upload` block, a
 * `container` (or its skills). Such ids belong to the upstream account that made them, which is never the gateway's
 * (the gateway has no Files API) and which no other channel shares, so a 404 to such a request is the client's:
 * failing over could only repeat it on every channel, and counting it would let any client charge failures to
 * channels at will. The cost of the rule: a channel that 404s everything (a wrong base_url) is not charged by the
 * requests that name ids, only by all the others, and those requests get the 404 without trying another channel.
 */
import { GatewayError } from '@gw/core';
import type { MessagesRequest } from '@gw/formats';
import type { ClassifiedError } from '@gw/providers';

const MODEL_NOT_FOUND = /^model:/i;

/** Content blocks looked at in all (tool results' own content included): a bound on hostile bodies. */
const MAX_BLOCKS = 4096;

/**
 * A 404 judged the client's when the request names upstream objects by id; any other verdict unchanged. Native
 * channels only: they pass those ids on as sent, where a translated request carries none (a file source cannot be
 * translated, `container` is left out), so its 404 says nothing about them. Both bodies must name one: the one sent
 * (`sent`, after the channel's overrides, which may drop the client's ids) and the client's own (`asked`): ids a
 * channel's override adds (an operator's `container`) are the channel's, and so is their 404.
 */
export function clientNotFound(c: ClassifiedError, channel: { type: string }, sent: MessagesRequest, asked: MessagesRequest): ClassifiedError {
  if (c.kind !== 'not_found' || channel.type !== 'anthropic' || !namesUpstreamObjects(sent)) return c;
  if (asked !== sent && !namesUpstreamObjects(asked)) return c;
  const said = c.detail ?? '';
  // Anthropic's own "model not found" ("model: <name>") is the channel's whatever else the request names: any client
  // can add a file block, and the message is the channel's mapping, not the client's business.
  if (MODEL_NOT_FOUND.test(said)) return c;
  const message = `The upstream could not find a file, container or skill this request names${said ? `: ${said}` : '.'}`;
  return { kind: 'invalid_request', retryable: false, error: new GatewayError(404, 'upstream_object_not_found', message, { type: 'not_found_error' }) };
}

/** Whether the request names an object of the upstream's account by id (a file, a container, a skill). */
export function namesUpstreamObjects(body: MessagesRequest): boolean {
  const container = (body as { container?: unknown }).container;
  if (typeof container === 'string' ? container !== '' : container !== null && typeof container === 'object') return true;
  let seen = 0;
  // A tool result's content (one level: it holds no tool results of its own) may carry a file source too.
  const byId = (blocks: unknown, top: boolean): boolean => {
    if (!Array.isArray(blocks)) return false;
    for (const b of blocks) {
      if (++seen > MAX_BLOCKS) return false;
      if (!b || typeof b !== 'object') continue;
      const block = b as { type?: unknown; source?: { type?: unknown }; content?: unknown };
      if (block.type === 'container_upload' || block.source?.type === 'file') return true;
      if (top && block.type === 'tool_result' && byId(block.content, false)) return true;
    }
    return false;
  };
  return body.messages.some((m) => byId(m.content, true));
}
