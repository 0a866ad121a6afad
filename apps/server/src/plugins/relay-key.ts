/**
 * The /v1 relay key of a request, checked once: the front door checks it before the body is read
 * (an anonymous or unknown key gets its 401 without the upload being consumed) and the model routes reuse it.
 */
import type { Services } from '../services';

type GateKey = ReturnType<Services['relay']['gate']['authenticate']>;
// Kept on the request itself under a private symbol: a WeakMap lookup and insert per request measured
// several times the cost of a property.
const KEY = Symbol('relayKey');
type Keyed = Request & { [KEY]?: GateKey };

/** The authenticated relay key; throws the gate's 401 GatewayError. */
export function relayKeyOf(s: Services, request: Request): GateKey {
  return ((request as Keyed)[KEY] ??= s.relay.gate.authenticate(request.headers));
}
