/**
 * The client's address. X-Forwarded-For is trusted only when TRUST_PROXY is on, otherwise any
 * caller could pick the address its IP allow-list or login limit is checked against.
 * With TRUST_PROXY_HOPS = n the address is the one the outermost of the operator's n proxies saw: the
 * n-th entry from the right, as each proxy that appends (nginx's `$proxy_add_x_forwarded_for`, HAProxy's
 * `option forwardfor`) adds its peer at the end and whatever the client sent stays on the left. Without it
 * the leftmost entry is taken, which is right only behind a proxy that overwrites the header.
 * A forwarded entry is the client's text, so it is bounded (boundedIpText) before anything records it.
 */
import { boundedIpText } from '@gw/identity';

let trust: boolean | number = false;
/** true: the leftmost X-Forwarded-For entry; n ≥ 1: n proxies, the n-th entry from the right; false: the socket. */
export const setTrustProxy = (on: boolean | number) => { trust = on; };

export function clientIp(request: Request, server: { requestIP(r: Request): { address: string } | null } | null): string {
  if (trust) {
    const xff = request.headers.get('x-forwarded-for');
    if (xff) {
      if (trust === true) return boundedIpText(xff.split(',')[0]!.trim());
      // Fewer entries than proxies: the request skipped an outer proxy; the farthest address known is taken.
      const parts = xff.split(',');
      return boundedIpText(parts[Math.max(0, parts.length - trust)]!.trim());
    }
  }
  return server?.requestIP(request)?.address ?? '';
}
