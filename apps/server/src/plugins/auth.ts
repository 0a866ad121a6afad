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

/** A cookie's value; a malformed percent-encoding reads as no cookie (never a 500). */
export function readCookie(header: string | null, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === name) {
      try {
        return decodeURIComponent(part.slice(i + 1).trim());
      } catch {
        return undefined;
      }
    }
  }
  return undefined;
}

/**
 * Whether a request would be authenticated by the session cookie, the credential a browser adds on its own.
 * Decided exactly as `resolve` decides: an empty Authorization header is no credential, so the cookie is
 * used, and the request must pass the cross-site check (it skipped it when only the header's presence counted).
 */
export const usesSessionCookie = (request: Request) =>
  !request.headers.get('authorization') && readCookie(request.headers.get('cookie'), SESSION_COOKIE) !== undefined;

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
  const sid = readCookie(request.headers.get('cookie'), SESSION_COOKIE);
  const p = sid ? await s.auth.fromSession(sid) : null;
  return { principal: p, credentialError: p || !sid ? null : new GatewayError(401, 'session_expired', 'Session expired or logged out; log in again') };
}

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
