/**
 * A realtime session keeps the model it was admitted with. The key's model allow-list, the price and the
 * quota hold were all judged on the handshake's `?model=`; a client event naming another model
 * (`session.update`'s `session.model`, `response.create`'s `response.model`) would have an upstream that
 * honours it switch to a model the key may not use, billed at the admitted one's price. Such an event is
 * refused. One naming the admitted model is forwarded without the field, so the upstream model the
 * channel mapped at connect stays in force.
 */

export type ModelPin = { refuse: string } | { forward: string } | undefined;

/** What to do with a client event whose `field` object may name a model (undefined: forward it as it is). */
export function pinModel(event: Record<string, any>, field: 'session' | 'response', admitted: string): ModelPin {
  const body = event[field];
  if (!body || typeof body !== 'object' || Array.isArray(body)) return undefined;
  // Some parsers match keys case-insensitively (Go's encoding/json): `Model` is a model too.
  const keys = Object.keys(body).filter((k) => k.toLowerCase() === 'model');
  if (keys.length === 0) return undefined;
  const other = keys.find((k) => body[k] !== admitted);
  // The client's value is never serialised here (it may be huge or deep): a non-string is only named so.
  if (other !== undefined) return { refuse: typeof body[other] === 'string' ? body[other] : '(not a string)' };
  const rest = { ...body };
  for (const k of keys) delete rest[k];
  return { forward: JSON.stringify({ ...event, [field]: rest }) };
}

/** The error a refused model change is answered with (the session stays open on the admitted model). */
export function modelChangeRefusal(admitted: string, asked: string) {
  const shown = asked.length > 100 ? `${asked.slice(0, 100)}…` : asked;
  return {
    refuse: true as const,
    type: 'invalid_request_error',
    code: 'model_change_not_allowed',
    message: `This session's model is ${admitted}, fixed when it was opened; ${shown} cannot be chosen inside it. Open a new session with ?model= to use another model`,
  };
}
