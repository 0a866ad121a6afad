/**
 * Management authentication: resolves the caller (session cookie or `gwm_` access token) once per
 * request. The front door calls it before any body is read (an anonymous or bad credential gets its
 * 401 without the upload being consumed); `derive` exposes the same result to routes, and the `role`
 * macro enforces the minimum role in `transform`.
 */
import { Elysia } from 'elysia';
import { GatewayError } from '@gw/core';
import { ROLE } from '@gw/db';
import { SESSION_COOKIE, type Principal } from '@gw/identity';
import type { Services } from '../services';

export type RoleName = keyof typeof ROLE;
export type Credentials = { principal: Principal | null; credentialError: GatewayError | null };

/**
 * Every value of cookie `name`, in header order, each once; malformed percent-encodings are skipped. A browser
 * sends several cookies of one name when they differ in Domain or Path: a sibling host can set one for the parent
 * domain (cookie tossing), and a longer Path is sent first, so "the first one" can be the sibling's.
 */
export function readCookies(header: string | null, name: string): string[] {
  if (!header) return [];
  // A Set, not a list search: this runs before any credential is checked, and a 16 KB header of distinct values made
  // the search quadratic (~6 ms of CPU per read, twice per request, for anyone).
  const out = new Set<string>();
  for (const part of header.split(';')) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === name) {
      try {
        out.add(decodeURIComponent(part.slice(i + 1).trim()));
      } catch {
        // not a cookie this gateway set
      }
    }
  }
  return [...out];
}

/** A session cookie as login sets it (randomToken(43)); of several, only these are looked up. */
const SESSION_ID = /^[0-9A-Za-z]{43}$/;
/** Distinct well-formed session cookies looked up at most per request: a header full of them is no lookup flood. */
const MAX_SESSION_COOKIES = 4;

/**
 * Whether a request would be authenticated by the session cookie, the credential a browser adds on its own.
 * Decided exactly as `resolve` decides: an empty Authorization header is no credential, so the cookie is
 * used, and the request must pass the cross-site check (it skipped it when only the header's presence counted).
 */
export const usesSessionCookie = (request: Request) =>
  !request.headers.get('authorization') && readCookies(request.headers.get('cookie'), SESSION_COOKIE).length > 0;

/** Whether a URL's path (not its query) is under /v1/. */
function isV1(url: string): boolean {
  const start = url.indexOf('/', url.indexOf('//') + 2);
  return url.startsWith('/v1/', start);
}

const resolved = new WeakMap<Request, Promise<Credentials>>();
const NONE: Credentials = { principal: null, credentialError: null };

/** The management caller of a request, resolved once (memoised per request; sessions and tokens live in the database). */
export function managementCredentials(s: Services, request: Request): Promise<Credentials> {
  let c = resolved.get(request);
  if (!c) {
    c = resolve(s, request);
    resolved.set(request, c);
  }
  return c;
}

async function resolve(s: Services, request: Request): Promise<Credentials> {
  const authz = request.headers.get('authorization');
  if (authz) {
    const m = /^Bearer\s+(.+)$/i.exec(authz.trim());
    const token = m?.[1]?.trim() ?? '';
    if (token.startsWith('sk-')) {
      return { principal: null, credentialError: new GatewayError(401, 'wrong_credential_kind', 'Relay API keys (sk-…) are not accepted on the management API; use a management access token') };
    }
    const p = token ? await s.auth.fromBearer(token) : null;
    return { principal: p, credentialError: p ? null : new GatewayError(401, 'invalid_access_token', 'Invalid, expired or revoked access token') };
  }
  return sessionFromCookies(s, readCookies(request.headers.get('cookie'), SESSION_COOKIE));
}

const sessionExpired = () => new GatewayError(401, 'session_expired', 'Session expired or logged out; log in again');

/**
 * The caller of the request's `gw_session` cookies. One: as always. Several different ones (another host of the
 * parent domain set its own, to log the victim in as an account the attacker reads, or to shadow the real one):
 * each well-formed one is looked up; the live ones decide. None live: the session has expired. All of one user:
 * that user (a stale copy beside a live one is harmless). Sessions of different users: no session at all
 * (401 `ambiguous_session`), since nothing in the request tells which cookie this gateway set; acting as either
 * could be acting as the attacker. A junk cookie tossed beside the real one therefore logs nobody out.
 */
async function sessionFromCookies(s: Services, sids: string[]): Promise<Credentials> {
  if (!sids.length) return NONE;
  if (sids.length === 1) {
    const p = await s.auth.fromSession(sids[0]!);
    return { principal: p, credentialError: p ? null : sessionExpired() };
  }
  const candidates = sids.filter((v) => SESSION_ID.test(v));
  if (candidates.length > MAX_SESSION_COOKIES) return { principal: null, credentialError: ambiguousSession() };
  const live = (await Promise.all(candidates.map((v) => s.auth.fromSession(v)))).filter((p): p is Principal => p !== null);
  if (!live.length) return { principal: null, credentialError: sessionExpired() };
  if (live.some((p) => p.user.id !== live[0]!.user.id)) return { principal: null, credentialError: ambiguousSession() };
  return { principal: live[0]!, credentialError: null };
}

const ambiguousSession = () => new GatewayError(401, 'ambiguous_session',
  `Several ${SESSION_COOKIE} cookies of different accounts (or too many) were sent: another site under the same domain may have set one. Clear this site's cookies and log in again`);

/** The 401 a management route answers when a request has no valid credential, or null. */
export async function managementAuthError(s: Services, request: Request): Promise<GatewayError | null> {
  const c = await managementCredentials(s, request);
  return c.principal ? null : c.credentialError ?? new GatewayError(401, 'not_logged_in', 'Log in or send Authorization: Bearer <access token>');
}

export const authPlugin = (s: Services) =>
  new Elysia({ name: 'management-auth' })
    // Derives run for every route of the app; /v1 requests carry relay keys and never need this (and
    // get their answer without a promise: the hot path does not wait on the database).
    .derive({ as: 'global' }, ({ request }): Credentials | Promise<Credentials> => (isV1(request.url) ? NONE : managementCredentials(s, request)))
    .macro({
      /** Minimum role for a route: 'user' (any logged-in user), 'admin' or 'root'. */
      role: (min: RoleName) => ({
        transform({ principal, credentialError }: Credentials) {
          if (!principal) throw credentialError ?? new GatewayError(401, 'not_logged_in', 'Log in or send Authorization: Bearer <access token>');
          if (principal.user.role < ROLE[min]) throw new GatewayError(403, 'insufficient_role', `This operation needs the ${min} role`);
        },
      }),
    });

/** The principal of a route guarded by the `role` macro (present by construction). */
export function caller(ctx: { principal: Principal | null }): Principal {
  if (!ctx.principal) throw new GatewayError(401, 'not_logged_in', 'Log in first');
  return ctx.principal;
}
