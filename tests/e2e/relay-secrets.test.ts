/**
 * A channel's credentials never leave the gateway: not in JSON errors, stream error events, the channel
 * test endpoint, health reasons, nor the channel's own GET (credential-looking header values are masked).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { jsonResponse, sseResponse } from '../doubles/sse';
import { keyedUser, msg, send, setPrice, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
const ups: Scripted[] = [];
const up = (kind: 'anthropic' | 'openai') => { const u = upstream(kind); ups.push(u); return u; };
let key: string;
beforeAll(async () => {
  gw = await startGateway({ RELAY_PROBE_INTERVAL_MS: '3600000' });
  key = (await keyedUser(gw, 100_000_000)).key;
});
afterAll(async () => { for (const u of ups) await u.stop(); await gw.stop(); });

const ANT_KEY = 'sk-ant-api03-Q7xYp2LmN8vB4kR9tWz3HjD6fGs1Ae5C';
const GSK_KEY = 'gsk_Hq4Zr8Wm2Ny6Tb1Vx9Kc3Ld7Pf5Sj0Ua';
const ODD_KEY = 'A1b2C3d4E5f6G7h8I9j0KLMNOPqrst'; // no known prefix
const HEADER_SECRET = 'org-9f8e7d6c5b4a3928ZZ';

async function channel(model: string, kind: 'anthropic' | 'openai', apiKey: string, u: Scripted, headers: Record<string, string> = {}) {
  await setPrice(gw, model);
  const r = await gw.api('POST', '/api/channel/', { name: model, type: kind, base_url: u.url, key: apiKey, models: [model], timeout_ms: 5000, headers });
  expect(r.status).toBe(200);
  return r.body.data.id as number;
}

/** True when `text` holds the secret or any 8-character piece of it. */
function leaks(text: string, secret: string): boolean {
  for (let i = 0; i + 8 <= secret.length; i++) if (text.includes(secret.slice(i, i + 8))) return true;
  return false;
}

const anthropicFrames = (errorMessage: string) => [
  'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}}\n\n',
  'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
  'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}\n\n',
  `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: errorMessage } })}\n\n`,
];

describe('secrets never reach the client', () => {
  test('an Anthropic mid-stream error event carrying the key: replaced by the gateway\'s own, type kept', async () => {
    const u = up('anthropic');
    await channel('sec-ant', 'anthropic', ANT_KEY, u);
    u.fallback = { response: () => sseResponse(anthropicFrames(`invalid x-api-key ${ANT_KEY} (tail ${ANT_KEY.slice(-12)})`), {}) };
    const r = await send(gw, key, msg('sec-ant', { stream: true }));
    expect(r.status).toBe(200);
    expect(leaks(r.text, ANT_KEY)).toBe(false);
    expect(r.text).toContain('"type":"overloaded_error"');
    expect(r.text).toContain('event: error');
  });

  test('an OpenAI-type stream error with a gsk_ key: not forwarded', async () => {
    const u = up('openai');
    await channel('sec-gsk', 'openai', GSK_KEY, u);
    u.fallback = {
      response: () => sseResponse([
        'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}\n\n',
        `data: ${JSON.stringify({ error: { message: `Invalid API Key: ${GSK_KEY}`, type: 'invalid_request_error' } })}\n\n`,
      ], {}),
    };
    const r = await send(gw, key, msg('sec-gsk', { stream: true }));
    expect(r.status).toBe(200);
    expect(leaks(r.text, GSK_KEY)).toBe(false);
    expect(r.text).toContain('event: error');
  });

  test('an upstream 400 naming a key of unknown format, or its tail: useful message kept, key removed, length capped', async () => {
    const u = up('anthropic');
    await channel('sec-400', 'anthropic', ODD_KEY, u);
    u.fallback = { response: () => jsonResponse({ type: 'error', error: { type: 'invalid_request_error', message: `max_tokens too large for key ${ODD_KEY}; also ...${ODD_KEY.slice(-9)} ${'x'.repeat(5000)}` } }, 400) };
    const r = await send(gw, key, msg('sec-400'));
    expect(r.status).toBe(400);
    expect(r.body.error.message).toContain('max_tokens too large');
    expect(leaks(JSON.stringify(r.body), ODD_KEY)).toBe(false);
    expect(r.body.error.message.length).toBeLessThan(500);
  });

  test('credential header values: masked on GET, kept on a read-modify-write, scrubbed from test results and health reasons', async () => {
    const u = up('anthropic');
    const id = await channel('sec-hdr', 'anthropic', ODD_KEY, u, { 'x-org-secret': HEADER_SECRET, 'x-plain': 'v1' });
    const view = (await gw.api('GET', `/api/channel/${id}`)).body.data;
    expect(view.headers['x-plain']).toBe('v1');
    expect(leaks(JSON.stringify(view), HEADER_SECRET)).toBe(false);
    expect(leaks(JSON.stringify(view), ODD_KEY)).toBe(false);
    // Sending the masked headers back does not overwrite the secret.
    expect((await gw.api('PUT', '/api/channel/', { id, headers: view.headers })).status).toBe(200);
    expect((await send(gw, key, msg('sec-hdr'))).status).toBe(200);
    expect(u.last().headers['x-org-secret']).toBe(HEADER_SECRET);
    // The test endpoint shows the upstream's complaint without the secrets.
    u.fallback = { response: () => jsonResponse({ error: { message: `bad org ${HEADER_SECRET} for ${ODD_KEY}` } }, 400) };
    const t = await gw.api('POST', `/api/channel/${id}/test`, {});
    expect(t.status).toBe(200);
    expect(t.body.data.message).toContain('bad org');
    expect(leaks(JSON.stringify(t.body), HEADER_SECRET)).toBe(false);
    expect(leaks(JSON.stringify(t.body), ODD_KEY)).toBe(false);
  });

  test('an admin cannot point a channel at its own server to read the keys; root can move a channel', async () => {
    const real = up('anthropic');
    const id = await channel('sec-move', 'anthropic', ANT_KEY, real, { 'x-org-secret': HEADER_SECRET });
    expect((await gw.api('POST', `/api/channel/${id}/keys`, { keys: [GSK_KEY] })).status).toBe(200);
    const admin = await makeUser(gw, 10);
    const thief = up('anthropic');
    const moved = await gw.api('PUT', '/api/channel/', { id, base_url: thief.url }, admin.token);
    expect([moved.status, moved.body.error?.code, moved.body.error?.param]).toEqual([403, 'insufficient_role', 'base_url']);
    // Also with a new first key: keys 2.. and the credential header would still go along.
    expect((await gw.api('PUT', '/api/channel/', { id, base_url: thief.url, key: 'sk-admin-own-key-000000000' }, admin.token)).status).toBe(403);
    for (let i = 0; i < 3; i++) expect((await gw.api('POST', `/api/channel/${id}/test`, {}, admin.token)).status).toBe(200);
    expect(thief.hits).toBe(0);
    expect(real.last().headers['x-api-key']).toBe(ANT_KEY);
    // The same address (normalised), and every other field, stay the admin's to change.
    const same = await gw.api('PUT', '/api/channel/', { id, base_url: `${real.url}/`, priority: 5 }, admin.token);
    expect([same.status, same.body.data?.priority]).toEqual([200, 5]);
    // Root moves it.
    expect((await gw.api('PUT', '/api/channel/', { id, base_url: thief.url })).status).toBe(200);
    expect((await gw.api('POST', `/api/channel/${id}/test`, {})).status).toBe(200);
    expect(thief.hits).toBe(1);
  });

  test('a short key or credential header is masked whole: its ends would be most of it', async () => {
    const u = up('anthropic');
    const shortKey = 'k7Qp2xW9mZ4t'; // 12 characters
    const shortHeader = 'tok9Xq2W7z'; // 10 characters
    const id = await channel('sec-short', 'anthropic', shortKey, u, { 'x-org-token': shortHeader });
    const view = (await gw.api('GET', `/api/channel/${id}`)).body.data;
    expect(view.key).toBe('*'.repeat(shortKey.length));
    expect(view.headers['x-org-token']).toBe('*'.repeat(shortHeader.length));
    expect((await gw.api('GET', `/api/channel/${id}/keys`)).body.data[0].key).toBe('*'.repeat(shortKey.length));
    // Sent back masked, the stored value stays.
    expect((await gw.api('PUT', '/api/channel/', { id, headers: view.headers })).status).toBe(200);
    expect((await send(gw, key, msg('sec-short'))).status).toBe(200);
    expect(u.last().headers['x-org-token']).toBe(shortHeader);
    expect(u.last().headers['x-api-key']).toBe(shortKey);
    // Long secrets still show their ends for recognition.
    expect((await gw.api('GET', `/api/channel/${await channel('sec-long', 'anthropic', ANT_KEY, up('anthropic'))}`)).body.data.key).toBe(`${ANT_KEY.slice(0, 4)}…${ANT_KEY.slice(-4)}`);
  });
});
