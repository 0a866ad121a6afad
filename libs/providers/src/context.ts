import { requestToolNames, toolNameMap, type MessagesRequest } from '@gw/formats';
import type { DecodeContext } from './adapter';

/**
 * The decode context of a client request (requested model, stop sequences, tool names renamed to fit a
 * translated upstream, computed the same way the request translator renames them), plus optional extras.
 */
export function decodeContextFor(body: Pick<MessagesRequest, 'model' | 'stop_sequences' | 'tools' | 'tool_choice' | 'messages'>, extra: Partial<DecodeContext> = {}): DecodeContext {
  const names = requestToolNames(body);
  return { requestedModel: body.model, stopSequences: body.stop_sequences, toolNames: names.length ? toolNameMap(names).toClient : NO_RENAMES, ...extra };
}

/** A request naming no tool renames none: one shared empty map (readers only look names up), not a Set and two maps per request. */
const NO_RENAMES: Readonly<Record<string, string>> = Object.freeze(Object.create(null));
