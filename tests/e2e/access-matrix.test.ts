/**
 * The access matrix: anonymous / user / admin / root against every management route. Routes are
 * enumerated from the app itself, so a route added later is covered without touching this file.
 * Reset Password and both webhooks need no auth (nor do login and the reset request); every
 * other /api/ route does.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { createApp } from '../../apps/server/src/app';
import { PUBLIC_API_ROUTES } from '../../apps/server/src/plugins/openapi';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
let routes: Array<{ method: string; path: string }>;
let user: { id: number; token: string };
let admin: { id: number; token: string };
beforeAll(async () => {
  gw = await startGateway();
  routes = createApp(gw.services).routes
    .filter((r) => r.path.startsWith('/api/') && ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'].includes(r.method))
    .map((r) => ({ method: r.method, path: r.path }));
  user = await makeUser(gw, 1);
  admin = await makeUser(gw, 10);
});
afterAll(async () => { await gw.stop(); });

const key = (r: { method: string; path: string }) => `${r.method} ${r.path.replace(/\/$/, '')}`;
/** Unknown ids, so an allowed caller gets 400/404 and nothing real is changed. */
const concrete = (path: string) => path.replace(/:[^/]+/g, '999999');
/** Logout ends the credential that calls it: it is called with a throwaway token of the same user, so the sweep goes on. */
const call = async (r: { method: string; path: string }, token: string | null) => {
  if (token?.startsWith('gwm_') && key(r) === 'POST /api/user/logout') {
    const p = await gw.services.auth.fromBearer(token);
    if (p) token = (await gw.services.auth.createAccessToken(p.user.id, 'logout-probe')).token;
  }
  return gw.api(r.method, concrete(r.path), r.method === 'GET' || r.method === 'DELETE' ? undefined : {}, token);
};

/** The management routes this module owns, with the least role each needs. */
const OWNED: Record<string, 'user' | 'admin'> = {
  'GET /api/channel': 'admin', 'POST /api/channel': 'admin', 'PUT /api/channel': 'admin',
  'POST /api/channel/batch': 'admin', 'POST /api/channel/tag/enabled': 'admin', 'POST /api/channel/tag/disabled': 'admin',
  'GET /api/channel/:id': 'admin', 'DELETE /api/channel/:id': 'admin', 'POST /api/channel/:id/test': 'admin',
  'GET /api/user': 'admin', 'POST /api/user': 'admin', 'PUT /api/user': 'admin', 'GET /api/user/:id': 'admin',
  'DELETE /api/user/:id': 'admin', 'POST /api/user/:id/enable': 'admin', 'POST /api/user/:id/disable': 'admin',
  'PUT /api/user/self': 'user',
  'GET /api/token': 'user', 'POST /api/token': 'user', 'PUT /api/token': 'user', 'GET /api/token/:id': 'user', 'DELETE /api/token/:id': 'user',
};

describe('access matrix', () => {
  test('every owned route is mounted', () => {
    const mounted = new Set(routes.map(key));
    for (const k of Object.keys(OWNED)) expect({ k, mounted: mounted.has(k) }).toEqual({ k, mounted: true });
  });

  test('anonymous: 401 on every /api/ route except the public ones (which never answer 401/403)', async () => {
    expect(routes.length).toBeGreaterThan(Object.keys(OWNED).length);
    for (const r of routes) {
      const res = await call(r, null);
      if (PUBLIC_API_ROUTES.has(key(r))) {
        expect({ route: key(r), denied: [401, 403].includes(res.status) }).toEqual({ route: key(r), denied: false });
      } else {
        expect({ route: key(r), status: res.status }).toEqual({ route: key(r), status: 401 });
        expect(typeof res.body.error.code).toBe('string');
        expect(res.headers.get('request-id')).toBeTruthy();
      }
    }
  });

  test('auth runs before validation: no credentials and a bad body is 401, not 400', async () => {
    for (const r of routes.filter((x) => x.method !== 'GET' && !PUBLIC_API_ROUTES.has(key(x)))) {
      const res = await gw.api(r.method, concrete(r.path), '{not json', null);
      expect({ route: key(r), status: res.status }).toEqual({ route: key(r), status: 401 });
    }
  });

  test('wrong credentials: relay keys, garbage tokens and a disabled user are 401 everywhere', async () => {
    const disabled = await makeUser(gw, 10);
    await gw.services.users.update(disabled.id, { status: 2 });
    for (const r of routes.filter((x) => !PUBLIC_API_ROUTES.has(key(x)))) {
      for (const token of ['sk-not-for-management', 'gwm_forged', disabled.token]) {
        const res = await call(r, token);
        expect({ route: key(r), status: res.status }).toEqual({ route: key(r), status: 401 });
      }
    }
  });

  test('user: 403 on admin routes, allowed on user routes; every other route accepts the login', async () => {
    for (const r of routes.filter((x) => !PUBLIC_API_ROUTES.has(key(x)))) {
      const res = await call(r, user.token);
      const need = OWNED[key(r)];
      if (need === 'admin') {
        expect({ route: key(r), status: res.status, code: res.body.error?.code }).toEqual({ route: key(r), status: 403, code: 'insufficient_role' });
      } else {
        // Not owned here: the credential is valid, so never 401 (403 is the route's own role rule).
        expect({ route: key(r), unauthenticated: res.status === 401 }).toEqual({ route: key(r), unauthenticated: false });
        if (need === 'user') expect({ route: key(r), forbidden: res.status === 403 }).toEqual({ route: key(r), forbidden: false });
      }
    }
  });

  test('admin and root: allowed on every owned route', async () => {
    for (const token of [admin.token, gw.rootToken]) {
      for (const r of routes.filter((x) => OWNED[key(x)])) {
        const res = await call(r, token);
        expect({ route: key(r), status: res.status < 500 && ![401, 403].includes(res.status) }).toEqual({ route: key(r), status: true });
      }
    }
  });

  test('root-only rule: an admin is refused on root users, root is not', async () => {
    const root = (await gw.services.users.byUsername('root'))!;
    const other = await makeUser(gw, 10);
    expect((await gw.api('POST', `/api/user/${other.id}/disable`, undefined, admin.token)).status).toBe(403);
    expect((await gw.api('POST', `/api/user/${root.id}/disable`, undefined, admin.token)).status).toBe(403);
    expect((await gw.api('POST', `/api/user/${other.id}/disable`)).status).toBe(200);
  });
});
