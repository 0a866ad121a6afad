/**
 * The /v1 relay key of a request, checked once: the front door checks it before the body is read
 * (an anonymous or unknown key gets its 401 without the upload being consumed) and the model routes reuse it.
 */
import type { Services } from '../services';

type GateKey = ReturnType<Services['relay']['gate']['authenticate']>;
const keys = new WeakMap<Request, GateKey>();

/** The authenticated relay key; throws the gate's 401 GatewayError. */
export function relayKeyOf(s: Services, request: Request): GateKey {
  let k = keys.get(request);
  if (!k) {
    k = s.relay.gate.authenticate(request.headers);
    keys.set(request, k);
  }
  return k;
}
