/**
 * The client's address. X-Forwarded-For is trusted only when TRUST_PROXY is on, otherwise any
 * caller could pick the address its IP allow-list or login limit is checked against.
 */
let trustProxy = false;
export const setTrustProxy = (on: boolean) => { trustProxy = on; };

export function clientIp(request: Request, server: { requestIP(r: Request): { address: string } | null } | null): string {
  if (trustProxy) {
    const xff = request.headers.get('x-forwarded-for');
    if (xff) return xff.split(',')[0]!.trim();
  }
  return server?.requestIP(request)?.address ?? '';
}
