import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { ROOT_PASSWORD, makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway({ LOGIN_MAX_FAILURES: '3', LOGIN_LOCK_SECONDS: '2' }); });
afterAll(async () => { await gw.stop(); });

describe('login and sessions', () => {
  test('root logs in, gets an HttpOnly cookie, and /self works with it', async () => {
    const res = await fetch(`${gw.url}/api/user/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'root', password: ROOT_PASSWORD }) });
    expect(res.status).toBe(200);
    const cookie = res.headers.get('set-cookie')!;
    expect(cookie).toContain('HttpOnly');
    expect(cookie).toContain('SameSite=Lax');
    const body = (await res.json() as any);
    expect(body).toMatchObject({ success: true, message: '', data: { username: 'root', role: 100 } });
    expect(JSON.stringify(body)).not.toContain('password');
    const sid = cookie.split(';')[0]!;
    const self = await fetch(`${gw.url}/api/user/self`, { headers: { cookie: sid } });
    expect((await self.json() as any).data.username).toBe('root');
    // The session id is stored hashed: the raw value is nowhere in the table.
    const raw = sid.split('=')[1]!;
    expect((await gw.db.get('select count(*) as n from sessions where id_hash = ?', raw))).toEqual({ n: 0 });
    const out = await fetch(`${gw.url}/api/user/logout`, { method: 'POST', headers: { cookie: sid } });
    expect(out.status).toBe(200);
    const after = await fetch(`${gw.url}/api/user/self`, { headers: { cookie: sid } });
    expect(after.status).toBe(401);
    expect((await after.json() as any).error.code).toBe('session_expired');
  });

  test('wrong password is 401 and repeated failures lock the account with retry-after', async () => {
    const u = await makeUser(gw);
    const login = (password: string) => gw.api('POST', '/api/user/login', { username: u.username, password }, null);
    for (let i = 0; i < 3; i++) expect((await login('wrong-password')).status).toBe(401);
    const locked = await login(u.password);
    expect(locked.status).toBe(429);
    expect(locked.body.error.code).toBe('account_locked');
    expect(Number(locked.headers.get('retry-after'))).toBeGreaterThan(0);
    // Locks are rounded up to whole seconds (never shorter than LOGIN_LOCK_SECONDS): 2 s lasts 2-3 s.
    await Bun.sleep(3100);
    expect((await login(u.password)).status).toBe(200);
  }, 30_000);

  test('unknown user and wrong password give the same answer', async () => {
    const a = await gw.api('POST', '/api/user/login', { username: 'nobody-here', password: 'whatever-1' }, null);
    const b = await gw.api('POST', '/api/user/login', { username: 'root', password: 'whatever-1' }, null);
    expect(a.status).toBe(401);
    expect(a.body.error).toEqual({ ...b.body.error });
  });

  test('access tokens: create (shown once), use, list without secret, revoke', async () => {
    const u = await makeUser(gw);
    const created = await gw.api('POST', '/api/user/access_token', { name: 'ci', current_password: u.password }, u.token);
    expect(created.status).toBe(200);
    const token = created.body.data.token as string;
    expect(token.startsWith('gwm_')).toBe(true);
    expect((await gw.api('GET', '/api/user/self', undefined, token)).body.data.username).toBe(u.username);
    const list = await gw.api('GET', '/api/user/access_token', undefined, token);
    expect(list.body.data.map((t: any) => t.name)).toContain('ci');
    expect(JSON.stringify(list.body)).not.toContain(token);
    expect((await gw.api('DELETE', `/api/user/access_token/${created.body.data.id}`, { current_password: u.password }, u.token)).status).toBe(200);
    const after = await gw.api('GET', '/api/user/self', undefined, token);
    expect(after.status).toBe(401);
    expect(after.body.error.code).toBe('invalid_access_token');
  });

  test('a session alone cannot mint an access token (which would outlive it): the password is needed', async () => {
    const u = await makeUser(gw);
    const login = await gw.api('POST', '/api/user/login', { username: u.username, password: u.password }, null);
    const cookie = login.headers.get('set-cookie')!.split(';')[0]!;
    const mint = (body: unknown) => gw.api('POST', '/api/user/access_token', body, null, { cookie });
    const bare = await mint({ name: 'persist' });
    expect(bare.status).toBe(400);
    expect(bare.body.error.param).toBe('current_password');
    const wrong = await mint({ name: 'persist', current_password: 'not-the-password' });
    expect(wrong.status).toBe(400);
    expect(wrong.body.error).toMatchObject({ code: 'invalid_current_password', param: 'current_password' });
    // An access token cannot mint one without the password either.
    expect((await gw.api('POST', '/api/user/access_token', { name: 'persist' }, u.token)).status).toBe(400);
    const names = async () => (await gw.api('GET', '/api/user/access_token', undefined, u.token)).body.data.map((t: any) => t.name);
    expect(await names()).toEqual(['test']);

    const made = await mint({ name: 'laptop', current_password: u.password });
    expect(made.status).toBe(200);
    expect(await names()).toContain('laptop');
    // Made with the password, it outlives the session on purpose (logout ends only the session).
    expect((await gw.api('POST', '/api/user/logout', undefined, null, { cookie })).status).toBe(200);
    expect((await gw.api('GET', '/api/user/self', undefined, null, { cookie })).status).toBe(401);
    expect((await gw.api('GET', '/api/user/self', undefined, made.body.data.token)).status).toBe(200);
  }, 30_000);

  test('relay keys are refused on the management API', async () => {
    const r = await gw.api('GET', '/api/user/self', undefined, 'sk-anything');
    expect(r.status).toBe(401);
    expect(r.body.error.code).toBe('wrong_credential_kind');
  });
});

describe('error model', () => {
  test('every error has the four-string error object and a request id', async () => {
    const cases: Array<[string, string, string | undefined, Record<string, string>, number, string]> = [
      ['GET', '/nope', undefined, {}, 404, 'route_not_found'],
      ['PUT', '/api/user/login', undefined, {}, 405, 'method_not_allowed'],
      ['POST', '/api/user/login', '{bad', { 'content-type': 'application/json' }, 400, 'invalid_json'],
      ['POST', '/api/user/login', 'a=1', { 'content-type': 'application/x-www-form-urlencoded' }, 415, 'unsupported_media_type'],
      ['POST', '/api/user/login', '{"username":"root"}', { 'content-type': 'application/json' }, 400, 'missing_field'],
      ['POST', '/api/user/login', '{"username":5,"password":"x"}', { 'content-type': 'application/json' }, 400, 'invalid_type'],
    ];
    for (const [method, path, body, headers, status, code] of cases) {
      const res = await fetch(gw.url + path, { method, body, headers });
      expect(res.status).toBe(status);
      expect(res.headers.get('content-type')).toContain('application/json');
      const rid = res.headers.get('request-id')!;
      expect(rid).toMatch(/^req_/);
      const j = (await res.json() as any);
      expect(j.error.code).toBe(code);
      for (const k of ['message', 'type', 'param', 'code']) expect(typeof j.error[k]).toBe('string');
      expect(j.request_id).toBe(rid);
      expect(j.success).toBe(false);
    }
  });

  test('missing field names the field in param', async () => {
    const r = await gw.api('POST', '/api/user/login', { username: 'root' }, null);
    expect(r.body.error.param).toBe('password');
  });

  test('bodies over the configured limit get 413', async () => {
    const small = await startGateway({ MAX_BODY_BYTES: '2048' });
    try {
      const r = await small.api('POST', '/api/user/login', JSON.stringify({ username: 'x'.repeat(5000), password: 'y' }), null);
      expect(r.status).toBe(413);
      expect(r.body.error.type).toBe('request_too_large');
    } finally { await small.stop(); }
  });

  test('anonymous caller with a malformed body gets 401, not 400', async () => {
    const r = await gw.api('POST', '/api/user/access_token', '{bad', null);
    expect(r.status).toBe(401);
  });
});

test('chunked bodies over the limit get a JSON 413 too', async () => {
  const small = await startGateway({ MAX_BODY_BYTES: '2048' });
  try {
    const big = JSON.stringify({ username: 'x'.repeat(5000), password: 'y' });
    const body = new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode(big)); c.close(); } });
    const res = await fetch(`${small.url}/api/user/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    expect(res.status).toBe(413);
    expect(((await res.json() as any)).error.code).toBe('request_too_large');
  } finally { await small.stop(); }
});

test('an out-of-range query value names the query field in param', async () => {
  const gw2 = await startGateway();
  try {
    const r = await gw2.api('GET', '/api/user/?status=9');
    expect(r.status).toBe(400);
    expect(r.body.error.param).toBe('status');
  } finally { await gw2.stop(); }
});

test('behind a TLS proxy (PUBLIC_URL https://) the session cookie is Secure by default; COOKIE_SECURE=false still turns it off', async () => {
  const cookieOf = async (env: Record<string, string>) => {
    const g = await startGateway(env);
    try {
      const r = await g.api('POST', '/api/user/login', { username: 'root', password: ROOT_PASSWORD }, null);
      expect(r.status).toBe(200);
      return r.headers.get('set-cookie')!.split(';').map((p) => p.trim());
    } finally { await g.stop(); }
  };
  // Without Secure, a browser would also send it over plain HTTP to the same host, readable on the path.
  const proxied = await cookieOf({ PUBLIC_URL: 'https://gw.example.test' });
  expect(proxied).toContain('Secure');
  expect(proxied).toContain('HttpOnly');
  expect(await cookieOf({ PUBLIC_URL: 'https://gw.example.test', COOKIE_SECURE: 'false' })).not.toContain('Secure');
  expect(await cookieOf({ PUBLIC_URL: 'http://gw.example.test' })).not.toContain('Secure');
}, 60_000);
