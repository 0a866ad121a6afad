/**
 * The official OpenAI SDK's realtime clients (`openai/realtime/websocket` and the beta
 * `openai/beta/realtime/websocket`), unmodified, against `/v1/realtime` over wss:// with the gateway
 * serving TLS itself. Each client runs in its own process (openai-realtime-sdk-client.ts) that trusts
 * the test's self-signed certificate through NODE_EXTRA_CA_CERTS, the way a user trusts a private CA:
 * the SDK opens `new WebSocket(url, protocols)` and has no TLS options or socket factory to pass one.
 * Checked for each: the SDK's own events up to `response.done`, what reached the upstream double, and
 * the response billed in the usage log read through the management API.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { PRICE, SAMPLE_COST } from '../helpers/realtime-wiring';
import { SAMPLE_USAGE, startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';

const CLIENT = join(import.meta.dir, 'openai-realtime-sdk-client.ts');
const MODEL = 'gpt-realtime';
/** Each test starts a Bun process that loads the SDK: generous on a loaded machine. */
const TIMEOUT_MS = 20_000;

let dir: string;
let certFile: string;
let gw: TestGateway;
let up: RealtimeUpstreamDouble;
let user: { id: number; token: string };
let key: string;

/** A self-signed certificate for 127.0.0.1 (its own CA), as in the TLS end-to-end test. */
function makeCertificate(into: string): { certFile: string; keyFile: string } {
  const cert = join(into, 'cert.pem');
  const keyFile = join(into, 'key.pem');
  const r = Bun.spawnSync(['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
    '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost', '-keyout', keyFile, '-out', cert], { stderr: 'pipe' });
  if (r.exitCode !== 0) throw new Error(`openssl failed: ${r.stderr.toString()}`);
  return { certFile: cert, keyFile };
}

interface SdkRun { exit: number; protocol: string; url: string; events: any[]; error: string | null }

/** Runs the SDK client in a child process (bounded: killed after 15 s) and returns what it saw. */
async function runSdk(client: 'ga' | 'beta', opts: { trustCert?: boolean; key?: string } = {}): Promise<SdkRun> {
  const env: Record<string, string | undefined> = {
    ...process.env, GW_BASE_URL: `${gw.url}/v1`, GW_KEY: opts.key ?? key, GW_MODEL: MODEL, GW_CLIENT: client,
    NODE_EXTRA_CA_CERTS: opts.trustCert === false ? undefined : certFile,
  };
  const p = Bun.spawn([process.execPath, CLIENT], { env, stdout: 'pipe', stderr: 'pipe' });
  const timer = setTimeout(() => p.kill(), 15_000);
  const [exit, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
  clearTimeout(timer);
  const line = out.trim().split('\n').at(-1);
  if (!line) throw new Error(`SDK client printed nothing (exit ${exit}): ${err.slice(0, 500)}`);
  return { exit, ...JSON.parse(line) };
}

/** The caller's usage log through the management API (newest first). */
async function usageRows(): Promise<any[]> {
  const r = await gw.api('GET', '/api/log/self', undefined, user.token);
  expect(r.status).toBe(200);
  return r.body.data.items;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'gw-sdk-'));
  const tls = makeCertificate(dir);
  certFile = tls.certFile;
  gw = await startGateway({ TLS_CERT_FILE: tls.certFile, TLS_KEY_FILE: tls.keyFile });
  up = startRealtimeUpstream();
  expect((await gw.api('POST', '/api/channel/', { name: 'rt', type: 'openai', base_url: up.url, key: 'upstream-secret', models: [MODEL] })).status).toBe(200);
  expect((await gw.api('PUT', '/api/pricing/', PRICE)).status).toBe(200);
  user = await makeUser(gw);
  await gw.services.ledger.apply({ userId: user.id, kind: 'topup', amount: 1_000_000_000, ref: `seed-${user.id}`, at: 1 });
  key = (await gw.api('POST', '/api/token/', { name: 'sdk' }, user.token)).body.data.key;
});
afterAll(async () => { await up.stop(); await gw.stop(); rmSync(dir, { recursive: true, force: true }); });

/** What every SDK session must show: the relayed events, the SDK's frames upstream, one billed row. */
async function expectServedAndBilled(run: SdkRun, sent: unknown[]): Promise<void> {
  expect(run.error).toBeNull();
  expect(run.exit).toBe(0);
  expect(run.url).toBe(`${gw.url.replace('https', 'wss')}/v1/realtime?model=${MODEL}`);
  expect(run.protocol).toBe('realtime'); // the gateway answers the SDK's first subprotocol, never the key
  const types = run.events.map((e) => e.type);
  expect(types[0]).toBe('session.created');
  expect(types).toContain('response.created');
  expect(types.at(-1)).toBe('response.done');
  const text = run.events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  expect(text).toBe('Hello from the double');
  expect(run.events.at(-1).response.usage).toEqual(SAMPLE_USAGE);

  const conn = up.connections.at(-1)!;
  expect(conn.headers.authorization).toBe('Bearer upstream-secret');
  expect(JSON.stringify(conn.headers)).not.toContain(key); // the key subprotocol stops at the gateway
  expect(new URL(conn.url).searchParams.get('model')).toBe(MODEL);
  const got = up.received.filter((f) => f.conn === conn.id).map((f) => JSON.parse(String(f.data)));
  // As the SDK sent them, but a response.create, which it sends without an event_id, carries one the gateway gave it
  // (the id an upstream error refusing it names, libs/realtime/src/meter.ts).
  expect(got).toEqual((sent as any[]).map((e) => (e.type === 'response.create' && e.event_id === undefined ? { event_id: expect.stringMatching(/^evt_gw_\w+$/), ...e } : e)));

  // Billing is written when response.done passes the gateway; the SDK may exit a moment earlier.
  const end = Date.now() + 3000;
  let row: any;
  while (!(row = (await usageRows()).find((r) => r.request_id?.endsWith(`_${run.events.at(-1).response.id}`)))) {
    if (Date.now() > end) throw new Error(`no usage row for ${run.events.at(-1).response.id}: ${JSON.stringify(await usageRows())}`);
    await Bun.sleep(20);
  }
  // SAMPLE_USAGE split into its priced parts (text input = text − cached text, etc.), charged at PRICE.
  expect(row).toMatchObject({
    kind: 'realtime', model: MODEL, status: 200, error_code: '',
    input_tokens: 16, audio_input_tokens: 128, cache_read_tokens: 256, output_tokens: 30, audio_output_tokens: 82, cost: SAMPLE_COST,
  });
}

describe('official OpenAI SDK realtime client over wss://', () => {
  test('GA client (openai/realtime/websocket): session.update + response.create are relayed, response.done arrives, the response is billed', async () => {
    const run = await runSdk('ga');
    await expectServedAndBilled(run, [
      { type: 'session.update', session: { type: 'realtime', output_modalities: ['text'], instructions: 'Be brief.' } },
      { type: 'response.create' },
    ]);
    expect(run.events[0].session.type).toBe('realtime'); // GA shapes: no beta protocol was asked for
    expect(up.connections.at(-1)!.headers['sec-websocket-protocol']).toBeUndefined();
  }, TIMEOUT_MS);

  test('beta client (openai/beta/realtime/websocket): its openai-beta.realtime-v1 subprotocol reaches the upstream, beta events come back, billed', async () => {
    const run = await runSdk('beta');
    await expectServedAndBilled(run, [
      { type: 'session.update', session: { modalities: ['text'], instructions: 'Be brief.' } },
      { type: 'response.create' },
    ]);
    expect(up.connections.at(-1)!.headers['sec-websocket-protocol']).toBe('realtime, openai-beta.realtime-v1');
    expect(run.events[0].session.type).toBeUndefined(); // beta session shape
    expect(run.events[0].session.modalities).toEqual(['text', 'audio']);
  }, TIMEOUT_MS);

  test('the certificate is really verified: without NODE_EXTRA_CA_CERTS the SDK refuses the handshake', async () => {
    const before = up.connections.length;
    const run = await runSdk('ga', { trustCert: false });
    expect(run.exit).toBe(1);
    expect(run.error).toMatch(/certificate/i);
    expect(up.connections.length).toBe(before);
  }, TIMEOUT_MS);

  test('a wrong key: the SDK reports the refused handshake, nothing reaches the upstream, nothing is billed', async () => {
    const before = up.connections.length;
    const rows = (await usageRows()).length;
    const run = await runSdk('ga', { key: 'sk-not-a-gateway-key' });
    expect(run.exit).toBe(1);
    expect(run.error).not.toBeNull();
    expect(run.events).toEqual([]);
    expect(up.connections.length).toBe(before);
    expect((await usageRows()).length).toBe(rows);
  }, TIMEOUT_MS);
});
