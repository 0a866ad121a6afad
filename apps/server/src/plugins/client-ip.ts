/**
 * The client's address. X-Forwarded-For is trusted only when TRUST_PROXY is on, otherwise any
 * caller could pick the address its IP allow-list or login limit is checked against.
 * With TRUST_PROXY_HOPS = n the address is the one the outermost of the operator's n proxies saw: the
 * n-th entry from the right, as each proxy that appends (nginx's `$proxy_add_x_forwarded_for`, HAProxy's
 * `option forwardfor`) adds its peer at the end and whatever the client sent stays on the left. TRUST_PROXY alone
 * is n = 1 (see config); `true` here, the leftmost entry, is TRUST_PROXY_HOPS=0, right only behind proxies that
 * overwrite the header.
 * X-Real-IP is not read: one header to configure is one header to get right.
 */
import { boundedIpText, forwardedAddress } from '@gw/identity';

let trust: boolean | number = false;
/** true: the leftmost X-Forwarded-For entry; n ≥ 1: n proxies, the n-th entry from the right; false: the socket. */
export const setTrustProxy = (on: boolean | number) => { trust = on; };

export function clientIp(request: Request, server: { requestIP(r: Request): { address: string } | null } | null): string {
  if (trust) {
    const xff = request.headers.get('x-forwarded-for');
    if (xff) {
      const parts = xff.split(',');
      // Fewer entries than proxies: the request skipped an outer proxy; the farthest address known is taken.
      const entry = trust === true ? parts[0]! : parts[Math.max(0, parts.length - trust)]!;
      // An entry that is no address is the socket's (the proxy's): taken as written, every spelling of
      // nonsense was a per-address limit of its own.
      const address = forwardedAddress(entry);
      // Bounded all the same: the address is recorded in every usage row, session and log line.
      if (address !== null) return boundedIpText(address);
    }
  }
  return server?.requestIP(request)?.address ?? '';
}
