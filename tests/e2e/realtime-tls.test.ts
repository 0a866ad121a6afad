/**
 * Realtime clients the way the OpenAI SDK connects them: over wss:// to a gateway serving TLS itself
 * (TLS_CERT_FILE / TLS_KEY_FILE, a self-signed certificate made for this test), with the beta protocol
 * chosen by the `openai-beta.realtime-v1` subprotocol or the `OpenAI-Beta: realtime=v1` header. The
 * upstream double records what reached it and speaks the beta event shapes only when asked to.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';

let dir: string;
let cert: string;
let gw: TestGateway;
let up: RealtimeUpstreamDouble;
let key: string;

/** A self-signed certificate for 127.0.0.1 and localhost (it is its own CA). */
function makeCertificate(into: string): { certFile: string; keyFile: string } {
  const certFile = join(into, 'cert.pem');
  const keyFile = join(into, 'key.pem');
  const r = Bun.spawnSync(['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
    '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost', '-keyout', keyFile, '-out', certFile], { stderr: 'pipe' });
  if (r.exitCode !== 0) throw new Error(`openssl failed: ${r.stderr.toString()}`);
  return { certFile, keyFile };
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'gw-tls-'));
  const { certFile, keyFile } = makeCertificate(dir);
  cert = readFileSync(certFile, 'utf8');
  gw = await startGateway({ TLS_CERT_FILE: certFile, TLS_KEY_FILE: keyFile });
  up = startRealtimeUpstream();
  expect((await gw.api('POST', '/api/channel/', { name: 'rt', type: 'openai', base_url: up.url, key: 'upstream-secret', models: ['gpt-realtime'] })).status).toBe(200);
  expect((await gw.api('PUT', '/api/pricing/', { model: 'gpt-realtime', input: 1_000, output: 1_000, context_window: 16_000 })).status).toBe(200);
  const u = await makeUser(gw);
  await gw.services.ledger.apply({ userId: u.id, kind: 'topup', amount: 1_000_000_000, ref: `seed-${u.id}`, at: 1 });
  key = (await gw.api('POST', '/api/token/', { name: 'rt' }, u.token)).body.data.key;
});
afterAll(async () => { await up.stop(); await gw.stop(); rmSync(dir, { recursive: true, force: true }); });

/** Opens a wss:// session trusting the test certificate; resolves with the first event and the answered subprotocol. */
function session(opts: { protocols?: string[]; headers?: Record<string, string> }): Promise<{ first: any; protocol: string; ws: WebSocket }> {
  const ws = new WebSocket(`${gw.url.replace('https', 'wss')}/v1/realtime?model=gpt-realtime`, { ...opts, tls: { ca: cert } } as any);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no event within 3 s')), 3000);
    ws.onmessage = (e) => { clearTimeout(timer); resolve({ first: JSON.parse(String(e.data)), protocol: ws.protocol, ws }); };
    ws.onerror = () => { clearTimeout(timer); reject(new Error('websocket error')); };
    ws.onclose = (e) => { clearTimeout(timer); reject(new Error(`closed ${e.code} ${e.reason}`)); };
  });
}

describe('TLS', () => {
  test('HTTPS with a client that verifies the certificate; plain HTTP on the same port is not served', async () => {
    expect(gw.url).toStartWith('https://');
    const r = await fetch(`${gw.url}/health`, { tls: { ca: cert } } as any);
    expect(r.status).toBe(200);
    expect(await fetch(`${gw.url}/health`).then(() => 'ok', () => 'refused')).toBe('refused'); // untrusted without the CA
    const plain = await fetch(gw.url.replace('https', 'http') + '/health', { signal: AbortSignal.timeout(2000) }).then((x) => x.status, () => 'failed');
    expect(plain).not.toBe(200);
  });

  test('the session cookie is Secure by default when serving HTTPS', async () => {
    const u = await makeUser(gw);
    const r = await fetch(`${gw.url}/api/user/login`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: u.username, password: u.password }), tls: { ca: cert },
    } as any);
    expect(r.status).toBe(200);
    expect(r.headers.get('set-cookie')).toMatch(/;\s*Secure/i);
  });
});

describe('realtime over wss://', () => {
  test('the SDK way (key and beta as subprotocols): the beta subprotocol reaches the upstream, the key does not, beta events come back', async () => {
    const { first, protocol, ws } = await session({ protocols: ['realtime', `openai-insecure-api-key.${key}`, 'openai-beta.realtime-v1'] });
    const conn = up.connections.at(-1)!;
    expect(conn.headers['sec-websocket-protocol']).toBe('realtime, openai-beta.realtime-v1');
    expect(JSON.stringify(conn.headers)).not.toContain(key);
    expect(conn.headers.authorization).toBe('Bearer upstream-secret');
    expect(protocol).toBe('realtime');
    expect(first.type).toBe('session.created');
    expect(first.session.type).toBeUndefined(); // the beta shape
    expect(first.session.modalities).toEqual(['text', 'audio']);
    ws.close();
  });

  test('the OpenAI-Beta: realtime=v1 header reaches the upstream and selects the beta events', async () => {
    const { first, ws } = await session({ headers: { authorization: `Bearer ${key}`, 'OpenAI-Beta': 'realtime=v1' } });
    const conn = up.connections.at(-1)!;
    expect(conn.headers['openai-beta']).toBe('realtime=v1');
    expect(first.session.object).toBe('realtime.session');
    expect(first.session.type).toBeUndefined();
    ws.close();
  });

  test('a GA client sends neither and gets GA events', async () => {
    const { first, ws } = await session({ headers: { authorization: `Bearer ${key}` } });
    const conn = up.connections.at(-1)!;
    expect(conn.headers['openai-beta']).toBeUndefined();
    expect(conn.headers['sec-websocket-protocol']).toBeUndefined();
    expect(first.session.type).toBe('realtime');
    ws.close();
  });
});
