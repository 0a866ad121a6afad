/**
 * PostgreSQL mode: a short Redis blip (a reconnect, a failover) while a request ends. The release of its
 * concurrency slot (and of its balance hold) is a Redis command; when that one command failed, the slot stayed
 * counted until its lease lapsed (LIMIT_LEASE_MS, 120 s by default), so a key limited to one request in flight
 * was refused for two minutes after a blip of a second. A failed release is retried once Redis is back.
 * Redis sits behind a TCP proxy the test cuts; PostgreSQL stays reachable. PostgreSQL only: SQLite has no Redis.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { ON_PG, startGateway, type TestGateway } from '../helpers/gateway';
import { within } from '../helpers/cluster';
import { REDIS_TEST_URL } from '../helpers/redis';
import { tcpProxy, type TcpProxy } from '../helpers/tcp-proxy';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from './relay-setup';

const MODEL = 'blip-m';
let gw: TestGateway;
let proxy: TcpProxy;
let up: Scripted;

describe.skipIf(!ON_PG)('a Redis blip while a request ends', () => {
  beforeAll(async () => {
    const redis = new URL(REDIS_TEST_URL);
    proxy = tcpProxy({ host: redis.hostname, port: Number(redis.port || 6379) });
    gw = await startGateway({ REDIS_URL: `redis://127.0.0.1:${proxy.port}` });
    up = upstream('anthropic', { usage: { input: 0, output: 10 } });
    await addChannel(gw, { type: 'anthropic', url: up.url, models: [MODEL] });
    await setPrice(gw, MODEL, { input: 0, output: 1_000_000 });
  }, 30_000);
  afterAll(async () => {
    proxy?.up();
    await up?.stop();
    await gw?.stop();
    proxy?.stop();
  });

  /** One request that ends while Redis is unreachable: cut 300 ms after it starts, back `downMs` after it ended. */
  async function endDuringBlip(key: string, downMs: number, maxTokens = 10) {
    up.queue.push({ usage: { input: 0, output: 10 }, delayMs: 1_000 });
    const pending = send(gw, key, msg(MODEL, { max_tokens: maxTokens }));
    await Bun.sleep(300);
    proxy.down();
    const r = await pending;
    // Long enough for the client's reconnect attempts to give up on the commands sent meanwhile.
    await Bun.sleep(downMs);
    proxy.up();
    return r;
  }

  test('a key limited to one request in flight is admitted again within seconds, not after the lease', async () => {
    const u = await keyedUser(gw, 1_000_000, { max_concurrency: 1 });
    const r = await endDuringBlip(u.key, 3_500);
    expect(r.status).toBe(200);
    const t0 = performance.now();
    let next = await send(gw, u.key, msg(MODEL, { max_tokens: 10 }));
    while (next.status !== 200 && performance.now() - t0 < 8_000) {
      await Bun.sleep(250);
      next = await send(gw, u.key, msg(MODEL, { max_tokens: 10 }));
    }
    console.log(`after the blip: ${next.status} ${next.body?.error?.code ?? ''} ${(performance.now() - t0).toFixed(0)} ms after Redis was back`);
    expect(next.status).toBe(200);
    // Released once only: the limit of one still holds.
    up.queue.push({ usage: { input: 0, output: 10 }, delayMs: 1_500 });
    const slow = send(gw, u.key, msg(MODEL, { max_tokens: 10 }));
    await Bun.sleep(400);
    const second = await send(gw, u.key, msg(MODEL, { max_tokens: 10 }));
    expect([second.status, second.body?.error?.code]).toEqual([429, 'key_concurrency_exceeded']);
    expect((await slow).status).toBe(200);
  }, 30_000);

  test("the request's balance hold is released too: the user's money is not held until the hold's lease lapses", async () => {
    const u = await keyedUser(gw, 1_000_000);
    // Held for 1000 output tokens, charged for the 10 it used: a hold left behind shows in what is available.
    const r = await endDuringBlip(u.key, 3_500, 1_000);
    expect(r.status).toBe(200);
    const store = gw.services.backend.holds!.store;
    // Settled exactly once in PostgreSQL (reachable all along), whatever Redis missed.
    const charges = await gw.db.all("select amount from ledger where kind = 'charge' and ref = ?", r.headers.get('request-id')) as Array<{ amount: number }>;
    expect(charges.length).toBe(1);
    const charged = -Number(charges[0]!.amount);
    expect(charged).toBeGreaterThan(0);
    // What the shared admission lets the user spend: the balance after that charge, nothing of it still held.
    const t0 = performance.now();
    await within('the hold released', 8_000, async () => ((await store.available({ userId: u.id }).catch(() => ({ user: -1 }))).user ?? 0) === 1_000_000 - charged);
    console.log(`hold released ${(performance.now() - t0).toFixed(0)} ms after Redis was back`);
  }, 30_000);
});
