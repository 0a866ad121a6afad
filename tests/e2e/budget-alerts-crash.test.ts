/**
 * Alerts survive a kill: an alert is written in the transaction of the charge that crossed the
 * threshold, so a gateway killed with SIGKILL (charge only journaled, or alert committed but never
 * delivered) delivers it after the restart; receivers may see an event twice, never zero times.
 */
import { afterAll, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startAnthropicUpstream } from '../doubles/anthropic-upstream';
import { callJson, loginToken, startGatewayProcess } from '../helpers/gateway-process';
import { clearOfUtcDayEnd } from '../helpers/window-edge';

const dir = mkdtempSync(join(tmpdir(), 'gw-alert-crash-'));
const dbPath = join(dir, 'gw.db');
let accept = false;
const seen: Array<{ id: string; body: any; status: number }> = [];
const hook = Bun.serve({
  port: 0, hostname: '127.0.0.1',
  async fetch(req) {
    const status = accept ? 200 : 503;
    seen.push({ id: req.headers.get('x-gateway-event-id') ?? '', body: await req.json(), status });
    return new Response(null, { status });
  },
});
const env = {
  DATABASE_URL: `sqlite:${dbPath}`, PORT: '0', HOST: '127.0.0.1', ROOT_PASSWORD: 'crash-root-pw-1', BILLING_FLUSH_MS: '60000',
  ALERT_WEBHOOK_URL: `http://127.0.0.1:${hook.port}/`, ALERT_WEBHOOK_SECRET: 'crash-alert-secret-1', ALERT_WEBHOOK_RETRY_MS: '100',
};
const procs = new Set<Bun.Subprocess>();
const upstream = startAnthropicUpstream();
afterAll(() => {
  for (const p of procs) p.kill(9);
  upstream.stop();
  hook.stop(true);
  rmSync(dir, { recursive: true, force: true });
});

test('SIGKILL with one alert committed but undelivered and one charge only journaled: both alerts arrive after the restart', async () => {
  // The budget is daily: the charges before and after the restart must add up in one UTC day (see clearOfUtcDayEnd).
  await clearOfUtcDayEnd(60_000);
  upstream.script(() => ({ text: 'ok', usage: { input: 300, output: 0 } }));
  const a = await startGatewayProcess(env, procs);
  const token = await loginToken(a.url, 'root', env.ROOT_PASSWORD);
  expect((await callJson(a.url, 'POST', '/api/channel/', { name: 'c', type: 'anthropic', base_url: upstream.url, key: 'up-key-1', models: ['m'] }, token)).status).toBe(200);
  expect((await callJson(a.url, 'PUT', '/api/pricing/', { model: 'm', input: 1_000_000, output: 1_000_000, cache_read: 0, cache_write: 0 }, token)).status).toBe(200);
  const user = (await callJson(a.url, 'POST', '/api/user/', { username: 'crash-user', password: 'crash-user-pw-1', quota: 1_000_000 }, token)).body.data;
  const key = (await callJson(a.url, 'POST', '/api/token/', { name: 'k', user_id: user.id }, token)).body.data.key as string;
  expect((await callJson(a.url, 'PUT', '/api/budget/', { scope: 'user', subject_id: user.id, period: 'daily', limit: 1000 }, token)).status).toBe(200);
  const send = async () => {
    const res = await fetch(`${a.url}/v1/messages`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
    await res.text();
  };
  await send();
  await send(); // 600 of 1000: crosses 50 %
  // A management read flushes the batch: the charge and its alert commit; the receiver refuses it.
  const alerts = await callJson(a.url, 'GET', '/api/budget/alerts', undefined, token);
  expect(alerts.body.data.items.map((x: any) => [x.type, x.payload.data.threshold])).toEqual([['budget.threshold', 50]]);
  const deadline = Date.now() + 5000;
  while (Date.now() < deadline && !seen.length) await Bun.sleep(20);
  expect(seen[0]?.status).toBe(503);
  await send(); // 900: crosses 80 %, journaled only
  a.proc.kill(9);
  await a.proc.exited;

  accept = true;
  const b = await startGatewayProcess(env, procs);
  const until = Date.now() + 10_000;
  const delivered = () => new Set(seen.filter((s) => s.status === 200).map((s) => s.body.data.threshold));
  while (Date.now() < until && delivered().size < 2) await Bun.sleep(50);
  expect([...delivered()].sort()).toEqual([50, 80]);
  const t = await loginToken(b.url, 'root', env.ROOT_PASSWORD);
  const budget = (await callJson(b.url, 'GET', `/api/budget/user/${user.id}`, undefined, t)).body.data.budgets[0];
  expect(budget).toMatchObject({ spent: 900, alerted: [50, 80] });
  const outbox = (await callJson(b.url, 'GET', '/api/budget/alerts', undefined, t)).body.data.items;
  expect(outbox.map((x: any) => x.status)).toEqual(['delivered', 'delivered']);
  // One event id per threshold, whatever the number of attempts.
  expect(new Set(seen.map((s) => s.id)).size).toBe(2);
}, 90_000);
