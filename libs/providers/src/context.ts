import type { MessagesRequest } from '@gw/formats';
import type { DecodeContext } from './adapter';

/** The decode context of a client request (requested model, stop sequences), plus optional extras. */
export function decodeContextFor(body: Pick<MessagesRequest, 'model' | 'stop_sequences'>, extra: Partial<DecodeContext> = {}): DecodeContext {
  return { requestedModel: body.model, stopSequences: body.stop_sequences, ...extra };
}
