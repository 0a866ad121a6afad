import { requestToolNames, toolNameMap, type MessagesRequest } from '@gw/formats';
import type { DecodeContext } from './adapter';

/**
 * The decode context of a client request (requested model, stop sequences, tool names renamed to fit a
 * translated upstream, computed the same way the request translator renames them), plus optional extras.
 */
export function decodeContextFor(body: Pick<MessagesRequest, 'model' | 'stop_sequences' | 'tools' | 'tool_choice' | 'messages'>, extra: Partial<DecodeContext> = {}): DecodeContext {
  return { requestedModel: body.model, stopSequences: body.stop_sequences, toolNames: toolNameMap(requestToolNames(body)).toClient, ...extra };
}
