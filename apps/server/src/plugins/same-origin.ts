/**
 * Cross-site request refusal for cookie-authenticated writes. A browser attaches the session cookie to
 * requests from any page of the same *site* (a sibling port or subdomain, since SameSite=Lax only stops
 * other sites), so a state-changing request that relies on the cookie must prove it comes from our own
 * origin: `Sec-Fetch-Site: same-origin|none`, or else an `Origin` equal to this server's (its Host
 * header, or PUBLIC_URL's origin behind a proxy). Browsers send one of them on every POST/PUT/PATCH/DELETE;
 * a request with neither is not a browser's cross-site request (curl, the CLI) and is let through.
 */

/** The origin (`scheme://host[:port]`) of a URL, or null when it is not one. */
export function originOf(url: string | undefined): string | null {
  if (!url) return null;
  try {
    const u = new URL(url);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u.origin : null;
  } catch {
    return null;
  }
}

/** Whether the request comes from another origin, judged by the browser's own headers. */
export function isCrossSite(request: Request, publicOrigin: string | null): boolean {
  const site = request.headers.get('sec-fetch-site');
  if (site !== null) return site !== 'same-origin' && site !== 'none';
  const origin = request.headers.get('origin');
  if (origin === null) return false;
  if (publicOrigin !== null && origin === publicOrigin) return false;
  const host = request.headers.get('host');
  // Our own pages send Origin = the address they were loaded from, which is the Host they connect to.
  const own = originOf(origin);
  return own === null || host === null || new URL(own).host !== host.toLowerCase();
}
