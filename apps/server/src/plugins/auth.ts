/**
 * Management authentication: resolves the caller (session cookie or `gwm_` access token) in
 * `derive`, which runs before body validation, and the `role` macro enforces the minimum role in
 * `transform`, so an anonymous caller with a bad body gets 401, not 400 (STACK-NOTES 3).
 */
import { Elysia } from 'elysia';
import { GatewayError } from '@gw/core';
import { ROLE } from '@gw/db';
import { SESSION_COOKIE, type Principal } from '@gw/identity';
import type { Services } from '../services';

export type RoleName = keyof typeof ROLE;

function readCookie(header: string | null, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === name) return decodeURIComponent(part.slice(i + 1).trim());
  }
  return undefined;
}

/** Whether a URL's path (not its query) is under /v1/. */
function isV1(url: string): boolean {
  const start = url.indexOf('/', url.indexOf('//') + 2);
  return url.startsWith('/v1/', start);
}

export const authPlugin = (s: Services) =>
  new Elysia({ name: 'management-auth' })
    .derive({ as: 'global' }, ({ request }): { principal: Principal | null; credentialError: GatewayError | null } => {
      // Derives run for every route of the app; /v1 requests carry relay keys and never need this.
      if (isV1(request.url)) return { principal: null, credentialError: null };
      const authz = request.headers.get('authorization');
      if (authz) {
        const m = /^Bearer\s+(.+)$/i.exec(authz.trim());
        const token = m?.[1]?.trim() ?? '';
        if (token.startsWith('sk-')) {
          return { principal: null, credentialError: new GatewayError(401, 'wrong_credential_kind', 'Relay API keys (sk-…) are not accepted on the management API; use a management access token') };
        }
        const p = token ? s.auth.fromBearer(token) : null;
        return { principal: p, credentialError: p ? null : new GatewayError(401, 'invalid_access_token', 'Invalid, expired or revoked access token') };
      }
      const sid = readCookie(request.headers.get('cookie'), SESSION_COOKIE);
      const p = sid ? s.auth.fromSession(sid) : null;
      return { principal: p, credentialError: p || !sid ? null : new GatewayError(401, 'session_expired', 'Session expired or logged out; log in again') };
    })
    .macro({
      /** Minimum role for a route: 'user' (any logged-in user), 'admin' or 'root'. */
      role: (min: RoleName) => ({
        transform({ principal, credentialError }: { principal: Principal | null; credentialError: GatewayError | null }) {
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
