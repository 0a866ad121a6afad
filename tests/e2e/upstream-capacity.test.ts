/**
 * MAX_UPSTREAM_CONNECTIONS: past the cap a request is answered 503 overloaded_error at
 * once, before any quota hold or upstream call, instead of waiting in Bun's fetch queue; slots come back
 * on every way a request can end, so the counter never leaks.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { V, addChannel, keyedUser, msg, nodeOne, send, setPrice, upstream, type Scripted } from './relay-setup';

const CAP = 3;
let gw: TestGateway;
let up: Scripted;
let user: Awaited<ReturnType<typeof keyedUser>>;

beforeAll(async () => {
  // MAX_UPSTREAM_CONNECTIONS is a cap per process: every request goes to node 1.
  gw = nodeOne(await startGateway({ MAX_UPSTREAM_CONNECTIONS: String(CAP), RELAY_HEALTH_FAILURES: '1000' }));
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['cap-model'] });
  await setPrice(gw, 'cap-model');
  user = await keyedUser(gw, 1_000_000_000);
});
afterAll(async () => {
  await gw.stop();
  await up.stop();
});

const slots = () => gw.services.relay.slots;
const headers = () => ({ 'content-type': 'application/json', 'x-api-key': user.key, ...V });

/** Waits until the slot counter reads `n` (streams end asynchronously after the client goes). */
async function slotsBecome(n: number, ms = 3000): Promise<void> {
  const end = Date.now() + ms;
  while (slots().inUse !== n && Date.now() < end) await Bun.sleep(10);
  expect(slots().inUse).toBe(n);
  expect(gw.services.relay.inflight.size).toBe(n);
}

/** A stream the upstream keeps open (first frames, then silence); resolves once its first bytes arrived. */
async function holdStream(): Promise<{ ctrl: AbortController; status: number }> {
  up.queue.push({ text: 'held open', pause: { afterFrames: 2, ms: 30_000 } }); // silent after its first content event: the stream is committed
  const ctrl = new AbortController();
  const res = await fetch(`${gw.url}/v1/messages`, { method: 'POST', headers: headers(), body: JSON.stringify(msg('cap-model', { stream: true })), signal: ctrl.signal });
  const reader = res.body!.getReader();
  const first = await reader.read();
  expect(new TextDecoder().decode(first.value)).toContain('message_start');
  reader.read().catch(() => {});
  return { ctrl, status: res.status };
}

describe('MAX_UPSTREAM_CONNECTIONS', () => {
  test('the cap is the configured one (under Bun\'s fetch limit of this process)', () => {
    expect(slots().max).toBe(CAP);
  });

  test('one request past the cap: 503 overloaded_error at once, no upstream call, no quota held; capacity comes back when streams end', async () => {
    const held = [await holdStream(), await holdStream(), await holdStream()];
    expect(held.map((h) => h.status)).toEqual([200, 200, 200]);
    await slotsBecome(CAP);
    const hits = up.hits;
    const available = gw.services.relay.quota.available(user.id);

    const t0 = performance.now();
    const r = await send(gw, user.key, msg('cap-model', { stream: true }));
    const ms = performance.now() - t0;
    expect(r.status).toBe(503);
    expect(r.body).toMatchObject({ type: 'error', error: { type: 'overloaded_error', code: 'upstream_capacity' } });
    expect(r.body.error.message).toContain(String(CAP));
    expect(r.headers.get('retry-after')).toBe('1');
    expect(r.headers.get('connection')).toBe('close');
    expect(r.headers.get('request-id')).toBeTruthy();
    expect(ms).toBeLessThan(1000);
    // count_tokens may call an upstream too: the same cap.
    const c = await fetch(`${gw.url}/v1/messages/count_tokens`, { method: 'POST', headers: headers(), body: JSON.stringify({ model: 'cap-model', messages: [{ role: 'user', content: 'hi' }] }) });
    expect(c.status).toBe(503);
    expect(up.hits).toBe(hits);
    expect(gw.services.relay.quota.available(user.id)).toBe(available);
    expect(slots().inUse).toBe(CAP);

    held[0]!.ctrl.abort();
    await slotsBecome(CAP - 1);
    const ok = await send(gw, user.key, msg('cap-model'));
    expect(ok.status).toBe(200);
    for (const h of held.slice(1)) h.ctrl.abort();
    await slotsBecome(0);
    const again = [await holdStream(), await holdStream(), await holdStream()];
    await slotsBecome(CAP);
    for (const h of again) h.ctrl.abort();
    await slotsBecome(0);
  });

  test('no slot leaks on any way a request ends', async () => {
    const ends: Array<[string, () => Promise<unknown>]> = [
      ['upstream 500', async () => { up.queue.push({ error: { status: 500 } }); expect((await send(gw, user.key, msg('cap-model'))).status).toBeGreaterThanOrEqual(500); }],
      ['upstream reset', async () => { up.queue.push({ reset: true }); expect((await send(gw, user.key, msg('cap-model', { stream: true }))).status).toBeGreaterThanOrEqual(500); }],
      ['stream cut mid-way', async () => { up.queue.push({ cutAfter: 2, stream: true }); await send(gw, user.key, msg('cap-model', { stream: true })); }],
      ['upstream slower than the first-byte timeout', async () => {
        const ch = gw.services.channelRegistry.candidates('cap-model', 'default')[0]!;
        expect((await gw.api('PUT', '/api/channel/', { id: ch.id, first_byte_timeout_ms: 200 })).status).toBe(200);
        up.queue.push({ delayMs: 1500 });
        const r = await send(gw, user.key, msg('cap-model', { stream: true }));
        expect(r.status).toBeGreaterThanOrEqual(500);
        expect((await gw.api('PUT', '/api/channel/', { id: ch.id, first_byte_timeout_ms: null })).status).toBe(200);
      }],
      ['client gone before the first byte', async () => {
        const hits = up.hits;
        up.queue.push({ delayMs: 800 });
        const ctrl = new AbortController();
        const p = fetch(`${gw.url}/v1/messages`, { method: 'POST', headers: headers(), body: JSON.stringify(msg('cap-model', { stream: true })), signal: ctrl.signal }).catch(() => null);
        // Gone while the upstream has the request: after a fixed 150 ms a loaded machine could still be admitting it,
        // and the delayed answer queued for it would go to the next case's request.
        while (up.hits === hits) await Bun.sleep(5);
        ctrl.abort();
        await p;
        await Bun.sleep(900);
      }],
      ['client gone mid-stream', async () => { const h = await holdStream(); h.ctrl.abort(); }],
      ['JSON success', async () => { expect((await send(gw, user.key, msg('cap-model'))).status).toBe(200); }],
      ['unknown model (404)', async () => { expect((await send(gw, user.key, msg('no-such-model'))).status).toBe(404); }],
      ['quota exhausted (402)', async () => {
        const poor = await keyedUser(gw, 0);
        expect((await send(gw, poor.key, msg('cap-model'))).status).toBe(402);
      }],
      ['count_tokens', async () => {
        const c = await fetch(`${gw.url}/v1/messages/count_tokens`, { method: 'POST', headers: headers(), body: JSON.stringify({ model: 'cap-model', messages: [{ role: 'user', content: 'hi' }] }) });
        expect(c.status).toBe(200);
      }],
    ];
    for (const [name, run] of ends) {
      await run();
      try {
        await slotsBecome(0);
      } catch (e) {
        throw new Error(`slot leaked after: ${name} (${slots().inUse} in use)`);
      }
    }
    // Still the full capacity after all of that.
    const held = [await holdStream(), await holdStream(), await holdStream()];
    expect((await send(gw, user.key, msg('cap-model'))).status).toBe(503);
    for (const h of held) h.ctrl.abort();
    await slotsBecome(0);
  });
});
