/**
 * The app's own route table as a lookup, so request-level policy (who must authenticate before the body
 * is read, which body limit applies, whether the body is raw bytes) is decided per route, including
 * routes added later, and unknown paths can be told apart from wrong methods (404 vs 405).
 */

export type RouteKind = 'relay' | 'management' | 'public';

export interface RoutePolicy {
  method: string;
  path: string;
  /** relay: /v1 key; management: cookie or access token; public: no credentials (small body limit). */
  kind: RouteKind;
  /** The handler reads the raw bytes (signed webhooks); no JSON content type or parsing is imposed. */
  raw: boolean;
}

/**
 * Routes that take a body without credentials. Every other /api route needs a session or access token
 * before its body is read, so a route missing here fails closed (401), never open.
 */
const PUBLIC_BODY_ROUTES = new Set([
  'POST /api/user/login', 'POST /api/user/reset/request', 'POST /api/user/reset',
  'POST /api/providerA/webhook', 'POST /api/providerB/webhook',
]);

export function policyOf(method: string, path: string): RoutePolicy {
  const kind: RouteKind = path.startsWith('/v1/') ? 'relay'
    : PUBLIC_BODY_ROUTES.has(`${method} ${path}`) || !path.startsWith('/api/') ? 'public' : 'management';
  return { method, path, kind, raw: path.endsWith('/webhook') };
}

export class RouteTable {
  private readonly exact = new Map<string, RoutePolicy>();
  private readonly patterns: Array<{ re: RegExp; policy: RoutePolicy }> = [];

  constructor(routes: Array<{ method: string; path: string }>) {
    for (const r of routes) {
      const policy = policyOf(r.method, r.path);
      if (!/[:*]/.test(r.path)) {
        this.exact.set(`${r.method} ${r.path}`, policy);
        // The router serves a path with and without its trailing slash alike: both spellings must find the policy,
        // or `/api/user/logout/` skipped the cross-site check and the authentication before the body.
        if (r.path.length > 1 && r.path.endsWith('/')) this.exact.set(`${r.method} ${r.path.slice(0, -1)}`, policy);
        else if (r.path.length > 1) this.exact.set(`${r.method} ${r.path}/`, policy);
      } else {
        const re = new RegExp(`^${r.path.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/:[^/]+/g, '[^/]+').replace(/\*/g, '.*')}/?$`);
        this.patterns.push({ re, policy });
      }
    }
  }

  /** The route a request would reach, or undefined (404/405). Static paths are one Map lookup. */
  find(method: string, pathname: string): RoutePolicy | undefined {
    const hit = this.exact.get(`${method} ${pathname}`);
    if (hit) return hit;
    for (const p of this.patterns) if (p.policy.method === method && p.re.test(pathname)) return p.policy;
    return undefined;
  }

  /** Methods that exist for a path (for 405's Allow header). Bun answers HEAD on every GET route (the GET
   *  answer's status and headers, no body), so a path with GET allows HEAD too (RFC 9110 §9.3.2). */
  methodsFor(pathname: string): string[] {
    const out = new Set<string>();
    for (const [k, p] of this.exact) if (k.slice(k.indexOf(' ') + 1) === pathname) out.add(p.method);
    for (const p of this.patterns) if (p.re.test(pathname)) out.add(p.policy.method);
    if (out.has('GET')) out.add('HEAD');
    return [...out];
  }
}
