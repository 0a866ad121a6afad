/**
 * Attack: get the channel's key back through an upstream error message that echoes it encoded. The
 * scrubber removed the key and any 8+ character piece of it, but not its base64 form (how a Basic
 * `Authorization` header, or an upstream that logs the header it got, would show it), its base64url
 * form or its percent-encoding: a 400 passed them to the client. Real gateway, real HTTP, upstream
 * doubles scripted to answer 400 with such a message.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

// A key with characters that base64 and percent-encoding both change.
const KEY = 'sk-proj-Zq9X+bT4mN7p/L2vR8sK1wY6hJ3cF5dG0aE_uI-oP';

let gw: TestGateway;
let a: Scripted;
let o: Scripted;
let key: string;

beforeAll(async () => {
  gw = await startGateway();
  a = upstream('anthropic');
  o = upstream('openai');
  for (const [type, url, model] of [['anthropic', a.url, 'claude-x'], ['openai', o.url, 'gpt-x']] as const) {
    const id = await addChannel(gw, { type, url, models: [model], name: `ch-${type}` });
    const r = await gw.api('PUT', '/api/channel/', { id, key: KEY });
    expect(r.status).toBe(200);
    await setPrice(gw, model);
  }
  key = (await keyedUser(gw, 100_000_000)).key;
});
afterAll(async () => {
  await a.stop();
  await o.stop();
  await gw.stop();
});

const b64 = (s: string) => Buffer.from(s).toString('base64');
const b64url = (s: string) => Buffer.from(s).toString('base64url');
/** Encodings of the key as an upstream might echo them, and the part of each that is the key's alone. */
const ECHOES: Array<[string, string, string]> = [
  ['base64', `the x-api-key header you sent (${b64(KEY)}) is not valid`, b64(KEY).slice(0, -4)],
  ['Basic auth', `Authorization: Basic ${b64(`user:${KEY}`)} rejected`, b64(`user:${KEY}`).slice(8, -4)],
  ['base64url', `token=${b64url(KEY)}`, b64url(KEY).slice(0, -4)],
  ['percent-encoded', `GET /v1/check?key=${encodeURIComponent(KEY)} failed`, encodeURIComponent(KEY)],
];

/** Every 12-character window of `secret` that appears in `text`. */
const windowsIn = (text: string, secret: string) => {
  const hits: string[] = [];
  for (let i = 0; i + 12 <= secret.length; i++) if (text.includes(secret.slice(i, i + 12))) hits.push(secret.slice(i, i + 12));
  return hits;
};

describe('an upstream 400 echoing the channel key in an encoded form never reaches the client', () => {
  for (const [kind, model, up] of [['anthropic', 'claude-x', () => a], ['openai', 'gpt-x', () => o]] as const) {
    for (const [name, message, core] of ECHOES) {
      for (const stream of [false, true]) {
        test(`${kind}, ${name}, ${stream ? 'stream' : 'JSON'}`, async () => {
          up().queue.push({ error: { status: 400, message } });
          const r = await send(gw, key, msg(model, { stream }));
          expect(r.status).toBe(400);
          expect(r.body.error.code).toBe('upstream_invalid_request');
          expect(r.body.error.message).toContain('[redacted]');
          expect(windowsIn(r.text, core)).toEqual([]);
          expect(windowsIn(r.text, KEY)).toEqual([]);
        });
      }
    }
  }
});

describe('upstream response headers never carry the key to the client (held: none are forwarded)', () => {
  for (const [kind, model, up] of [['anthropic', 'claude-x', () => a], ['openai', 'gpt-x', () => o]] as const) {
    for (const [what, plan] of [
      ['200 JSON', { headers: { 'x-echo-key': KEY, 'set-cookie': `k=${KEY}` } }],
      ['200 stream', { stream: true, headers: { 'x-echo-key': KEY } }],
      ['429', { error: { status: 429, retryAfter: KEY } }],
    ] as const) {
      test(`${kind}, ${what}`, async () => {
        up().queue.push(plan as any);
        const r = await send(gw, key, msg(model, { stream: what === '200 stream' }));
        const all = [...r.headers].map(([k, v]) => `${k}: ${v}`).join('\n') + r.text;
        expect(windowsIn(all, KEY)).toEqual([]);
        if (what === '429') expect(r.headers.get('retry-after') === null || /^\d+$/.test(r.headers.get('retry-after')!)).toBe(true);
      });
    }
  }
});
