/**
 * Attack from a hostile (or broken) alert webhook receiver: one that never answers, one that answers
 * 200 and then streams a body forever, one that redirects to another address. The delivery worker must
 * bound every attempt, never follow the redirect, keep going with the other alerts, never slow the
 * requests whose charges wrote the alerts, and let the gateway stop while an attempt hangs.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

type Mode = 'hang' | 'endless' | 'redirect' | 'ok';
let mode: Mode = 'ok';
const seen: Array<{ mode: Mode; id: string }> = [];
let redirectTargetHits = 0;
const enc = new TextEncoder();
let hookPort = 0;
const hook = Bun.serve({
  port: 0, hostname: '127.0.0.1', idleTimeout: 0,
  async fetch(req: Request): Promise<Response> {
    const path = new URL(req.url).pathname;
    if (path === '/elsewhere') { redirectTargetHits++; return new Response('ok'); }
    seen.push({ mode, id: req.headers.get('x-gateway-event-id') ?? '' });
    if (mode === 'hang') return new Promise<Response>(() => {});
    if (mode === 'redirect') return new Response(null, { status: 302, headers: { location: `http://127.0.0.1:${hookPort}/elsewhere` } });
    if (mode === 'endless') {
      let timer: ReturnType<typeof setInterval>;
      return new Response(new ReadableStream({
        start(c) { timer = setInterval(() => { try { c.enqueue(enc.encode('x'.repeat(65536))); } catch { clearInterval(timer); } }, 1); },
        cancel() { clearInterval(timer); },
      }), { status: 200 });
    }
    return new Response('ok');
  },
});

hookPort = hook.port!;

// Budgets, and so their alerts, are SQLite-only for now (PostgreSQL mode answers 501; tests/e2e/budgets.test.ts).
let gw: TestGateway;
let up: Scripted;
beforeAll(async () => {
  gw = await startGateway({
    BILLING_FLUSH_MS: '1', ALERT_WEBHOOK_URL: `http://127.0.0.1:${hook.port}/hook`, ALERT_WEBHOOK_SECRET: 'alert-secret-0123456789',
    ALERT_WEBHOOK_TIMEOUT_MS: '3000', ALERT_WEBHOOK_RETRY_MS: '60000',
  });
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['m'] });
  await setPrice(gw, 'm', { input: 1_000_000, output: 1_000_000 });
}, 30_000);
afterAll(async () => {
  await up.stop();
  await gw.stop();
  hook.stop(true);
}, 30_000);

const alertRow = (eventId: string) => gw.db.get('select status, attempts, last_error from alert_outbox where event_id = ?', eventId);

/** One charge of `n` input tokens against a fresh 1000-unit user budget: one alert per threshold crossed. */
async function alertsFor(n: number): Promise<{ ms: number; ids: string[] }> {
  const u = await keyedUser(gw);
  await gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: u.id, period: 'daily', limit: 1000 });
  up.queue.push({ text: 'ok', usage: { input: n, output: 0 } });
  const t0 = performance.now();
  const r = await send(gw, u.key, { ...msg('m'), max_tokens: 1 });
  const ms = performance.now() - t0;
  expect(r.status).toBe(200);
  const rows = await gw.db.all('select event_id from alert_outbox where payload like ? order by id', `%"user_id":${u.id},%`);
  return { ms, ids: rows.map((x) => x.event_id) };
}

async function until(cond: () => boolean | Promise<boolean>, ms = 5000) {
  const end = Date.now() + ms;
  while (!(await cond()) && Date.now() < end) await Bun.sleep(20);
  expect(await cond()).toBe(true);
}

test('a receiver that never answers: the attempt ends at the timeout and is retried later; requests are not slowed', async () => {
  mode = 'hang';
  const { ms, ids } = await alertsFor(600); // 50 %
  expect(ids).toHaveLength(1);
  expect(ms).toBeLessThan(2500);
  await until(async () => (await alertRow(ids[0]!)).attempts === 1, 10_000);
  expect(await alertRow(ids[0]!)).toMatchObject({ status: 'pending', attempts: 1 });
  expect((await alertRow(ids[0]!)).last_error).toMatch(/timed? ?out|abort/i);
  // While an attempt hangs (it would for 3 s), a second charge's request is answered well before that.
  await alertsFor(600);
  await until(() => seen.filter((x) => x.mode === 'hang').length >= 2, 10_000);
  const third = await alertsFor(600);
  expect(third.ms).toBeLessThan(2500);
}, 30_000);

test('a 200 with an endless body is acknowledged without reading the body, and the worker moves on', async () => {
  mode = 'endless';
  const { ids } = await alertsFor(900); // 50 % and 80 %
  expect(ids).toHaveLength(2);
  await until(async () => (await Promise.all(ids.map(alertRow))).every((r) => r.status === 'delivered'), 15_000);
}, 30_000);

test('a redirect is not followed: it is a failed attempt, retried later', async () => {
  mode = 'redirect';
  const { ids } = await alertsFor(1000); // 50, 80, 100 %
  expect(ids).toHaveLength(3);
  await until(async () => (await Promise.all(ids.map(alertRow))).every((r) => r.attempts === 1), 15_000);
  for (const id of ids) expect(await alertRow(id)).toMatchObject({ status: 'pending', last_error: 'HTTP 302' });
  expect(redirectTargetHits).toBe(0);
}, 30_000);

test('the gateway stops promptly while a delivery attempt hangs', async () => {
  mode = 'hang';
  const before = seen.length;
  await alertsFor(600);
  await until(() => seen.length > before);
  const t0 = performance.now();
  await gw.stop();
  // Well before the attempt's own 3 s deadline: shutdown cuts it.
  expect(performance.now() - t0).toBeLessThan(2500);
}, 30_000);
