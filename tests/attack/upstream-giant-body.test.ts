/**
 * Attack from the upstream side: answer a non-streaming request with a 200 whose JSON body never ends
 * (or is gigabytes long). The relay read it with `response.json()`, buffering all of it: memory grows
 * at the upstream's speed until the channel timeout. Now the body is read up to 32 MiB, then the read is
 * cancelled and the attempt fails as the upstream's fault (502 upstream_bad_response, fails over).
 * The same holds for the count_tokens answer (64 KiB) and the health probe (status only, body not read).
 * Real gateway, upstream double answering with a generated stream that counts what was pulled from it.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { ON_PG, startGateway, type TestGateway } from '../helpers/gateway';
import { dropSchema, freshSchema, PG_TEST_URL } from '../helpers/postgres';
import { freshPrefix, REDIS_TEST_URL, settleAdmissionEpoch } from '../helpers/redis';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let a: Scripted;
let key: string;

beforeAll(async () => {
  gw = await startGateway({ RELAY_HEALTH_FAILURES: '1000' });
  a = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: a.url, models: ['claude-x'] });
  await setPrice(gw, 'claude-x');
  key = (await keyedUser(gw, 100_000_000)).key;
});
afterAll(async () => {
  await a.stop();
  await gw.stop();
});

const MB = new Uint8Array(1 << 20).fill(0x20);

test('a 200 JSON body of 512 MB is cut after the limit: 502 upstream_bad_response, no more than ~32 MB pulled', async () => {
  let pulled = 0;
  let cancelled = false;
  a.queue.push({
    response: () => new Response(new ReadableStream({
      start(c) { c.enqueue(new TextEncoder().encode('{"id":"msg_x","type":"message","role":"assistant","content":[{"type":"text","text":"')); },
      pull(c) {
        // Bounded even if nobody stops reading: 512 MiB, then an (invalid) end.
        if (pulled >= 512 * MB.length) return c.close();
        pulled += MB.length;
        c.enqueue(MB);
      },
      cancel() { cancelled = true; },
    }, { highWaterMark: 0 }), { headers: { 'content-type': 'application/json' } }),
  });
  const t0 = performance.now();
  const r = await send(gw, key, msg('claude-x'));
  const ms = performance.now() - t0;
  expect(r.status).toBe(502);
  expect(r.body.error.code).toBe('upstream_bad_response');
  await Bun.sleep(50);
  expect(pulled).toBeLessThan(48 * MB.length);
  expect(cancelled).toBe(true);
  console.log(`giant upstream body: answered in ${ms.toFixed(0)} ms after ${(pulled / MB.length).toFixed(0)} MiB pulled`);
}, 30_000);

test('a large but sane reply (4 MB of text) still passes', async () => {
  const text = 'x'.repeat(4 << 20);
  a.queue.push({ text });
  const r = await send(gw, key, msg('claude-x'));
  expect(r.status).toBe(200);
  expect(r.body.content[0].text.length).toBe(text.length);
});

test('count_tokens: an endless upstream count answer is not buffered; the local estimate answers', async () => {
  let pulled = 0;
  const hits = a.hits;
  a.queue.push({
    response: () => new Response(new ReadableStream({
      start(c) { c.enqueue(new TextEncoder().encode('{"input_tokens": 1')); },
      pull(c) {
        if (pulled >= 256 * MB.length) return c.close();
        pulled += MB.length;
        c.enqueue(MB);
      },
    }, { highWaterMark: 0 }), { headers: { 'content-type': 'application/json' } }),
  });
  const res = await fetch(`${gw.url}/v1/messages/count_tokens`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key, 'vendor-version': '2023-06-01' },
    body: JSON.stringify({ model: 'claude-x', messages: [{ role: 'user', content: 'Hello there' }] }),
  });
  expect(res.status).toBe(200);
  const n = ((await res.json()) as any).input_tokens;
  expect(Number.isSafeInteger(n) && n > 0).toBe(true);
  await Bun.sleep(50);
  expect(a.hits).toBe(hits + 1); // the upstream really was asked
  expect(pulled).toBeLessThan(16 * MB.length);
}, 30_000);

test('count_tokens: a normal upstream count is still used', async () => {
  a.queue.push({ usage: { input: 4242 } });
  const res = await fetch(`${gw.url}/v1/messages/count_tokens`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key, 'vendor-version': '2023-06-01' },
    body: JSON.stringify({ model: 'claude-x', messages: [{ role: 'user', content: 'Hello there' }] }),
  });
  expect(((await res.json()) as any).input_tokens).toBe(4242);
});

test('the health probe reads at most 64 KiB: an endless answer keeps the channel down, a real answer brings it back', async () => {
  // On PostgreSQL a schema of its own, not one handed back by an earlier gateway of this test process: the
  // background prober runs on the schema's leader only, and a lock left by an earlier gateway (not found yet;
  // see tests/e2e/startup-cleanup.test.ts for one such leak, fixed) would keep this one from leading.
  const schema = ON_PG ? freshSchema('gw_probe64k') : null;
  const prefix = freshPrefix('probe64k');
  // A new prefix has no admission epoch yet (read as a possible data loss): settled, as the helper does.
  if (schema) await settleAdmissionEpoch(prefix);
  const g2 = await startGateway({
    RELAY_HEALTH_FAILURES: '1', RELAY_PROBE_INTERVAL_MS: '100',
    ...(schema ? { DATABASE_URL: PG_TEST_URL, PG_SCHEMA: schema, REDIS_URL: REDIS_TEST_URL, REDIS_PREFIX: prefix, SECRET_KEY: 'cd'.repeat(32) } : {}),
  });
  expect(g2.services.backend.leader.isLeader).toBe(true);
  const b = upstream('anthropic');
  try {
    const id = await addChannel(g2, { type: 'anthropic', url: b.url, models: ['claude-z'] });
    await setPrice(g2, 'claude-z');
    const k = (await keyedUser(g2, 10_000_000)).key;
    let pulled = 0;
    let probes = 0;
    b.queue.push({ error: { status: 500 } });
    b.fallback = {
      response: () => {
        probes++;
        return new Response(new ReadableStream({
          pull(c) {
            if (pulled >= 256 * MB.length) return c.close();
            pulled += MB.length;
            c.enqueue(MB);
          },
        }, { highWaterMark: 0 }), { headers: { 'content-type': 'application/json' } });
      },
    };
    expect((await send(g2, k, msg('claude-z'))).status).toBe(502);
    // The confirming probe got an endless answer: not healthy, so the channel goes down.
    const down = Date.now() + 5000;
    while ((await g2.api('GET', `/api/channel/${id}`)).body.data.status !== 3 && Date.now() < down) await Bun.sleep(20);
    expect((await g2.api('GET', `/api/channel/${id}`)).body.data.status).toBe(3);
    // Several background probe rounds later it is still down, and no probe read the 256 MB answer: what the
    // double could write is what the sockets buffer before the probe cancels (a few MB each).
    const rounds = probes + 3;
    const end = Date.now() + 5000;
    while (probes < rounds && Date.now() < end) await Bun.sleep(50);
    expect((await g2.api('GET', `/api/channel/${id}`)).body.data.status).toBe(3);
    expect(pulled).toBeLessThan(probes * 8 * MB.length);
    // A real one-token answer re-enables it.
    b.fallback = { text: 'pong' };
    const up = Date.now() + 5000;
    while ((await g2.api('GET', `/api/channel/${id}`)).body.data.status !== 1 && Date.now() < up) await Bun.sleep(50);
    expect((await g2.api('GET', `/api/channel/${id}`)).body.data.status).toBe(1);
  } finally {
    await b.stop();
    await g2.stop();
    if (schema) await dropSchema(schema);
  }
}, 30_000);
