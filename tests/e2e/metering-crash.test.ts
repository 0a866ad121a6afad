/**
 * Metering survives a kill: settlements are journaled before a response (or stream) ends and written
 * to the database in batches; a gateway killed with SIGKILL before the batch was written replays the
 * journal on restart — every completed request billed exactly once, none twice.
 */
import { Database } from 'bun:sqlite';
import { afterAll, expect, test } from 'bun:test';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startAnthropicUpstream } from '../doubles/anthropic-upstream';
import { callJson, loginToken, startGatewayProcess } from '../helpers/gateway-process';

const dir = mkdtempSync(join(tmpdir(), 'gw-crash-'));
const dbPath = join(dir, 'gw.db');
// A flush interval far beyond the test: nothing reaches the tables before the kill but the journal.
const env = { DATABASE_URL: `sqlite:${dbPath}`, PORT: '0', HOST: '127.0.0.1', ROOT_PASSWORD: 'crash-root-pw-1', BILLING_FLUSH_MS: '60000' };
const procs = new Set<Bun.Subprocess>();
const upstream = startAnthropicUpstream();
afterAll(() => {
  for (const p of procs) p.kill(9);
  upstream.stop();
  rmSync(dir, { recursive: true, force: true });
});

const PRICE = { model: 'crash-model', input: 2_000_000, output: 10_000_000, cache_read: 0, cache_write: 0 };
const segments = () => readdirSync(`${dbPath}.settlements`).filter((f) => f.endsWith('.jsonl'));
const costOf = (input: number, output: number) => Math.ceil((input * PRICE.input + output * PRICE.output) / 1_000_000);

test('SIGKILL right after responses: the journal is replayed once, charges match, nothing is billed twice', async () => {
  upstream.script((req) => ({ text: 'ok', usage: { input: 10 + req.body.max_tokens, output: 7 } }));
  const a = await startGatewayProcess(env, procs);
  const token = await loginToken(a.url, 'root', env.ROOT_PASSWORD);
  expect((await callJson(a.url, 'POST', '/api/channel/', { name: 'c', type: 'anthropic', base_url: upstream.url, key: 'up-key-1', models: ['crash-model'] }, token)).status).toBe(200);
  expect((await callJson(a.url, 'PUT', '/api/pricing/', PRICE, token)).status).toBe(200);
  const user = await callJson(a.url, 'POST', '/api/user/', { username: 'crash-user', password: 'crash-user-pw-1', quota: 1_000_000 }, token);
  const key = (await callJson(a.url, 'POST', '/api/token/', { name: 'k', user_id: user.body.data.id }, token)).body.data.key as string;

  const ids: string[] = [];
  let expected = 0;
  for (let i = 1; i <= 6; i++) {
    const stream = i % 2 === 0;
    const res = await fetch(`${a.url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': key, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'crash-model', max_tokens: 6 + i, stream, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
    await res.text();
    ids.push(res.headers.get('request-id')!);
    expected += costOf(16 + i, 7); // output 7 ≤ max_tokens: plausible, billed as reported
  }
  a.proc.kill(9);
  await a.proc.exited;

  // Dead process, nothing in the tables yet: only the journal knows about these requests.
  const peek = new Database(dbPath, { readonly: true });
  expect(peek.query('select count(*) as n from usage_logs').get()).toEqual({ n: 0 });
  peek.close();
  expect(segments().length).toBeGreaterThan(0);

  const check = async (url: string) => {
    const t = await loginToken(url, 'root', env.ROOT_PASSWORD);
    const logs = await callJson(url, 'GET', `/api/log/?user_id=${user.body.data.id}&page_size=100`, undefined, t);
    expect(logs.body.data.items.map((l: any) => l.request_id).sort()).toEqual([...ids].sort());
    expect(logs.body.data.items.reduce((s: number, l: any) => s + l.cost, 0)).toBe(expected);
    const u = await callJson(url, 'GET', `/api/user/${user.body.data.id}`, undefined, t);
    expect(u.body.data.quota).toBe(1_000_000 - expected);
    const ledger = await callJson(url, 'GET', `/api/ledger/?user_id=${user.body.data.id}&page_size=100`, undefined, t);
    const charges = ledger.body.data.items.filter((e: any) => e.kind === 'charge');
    expect(charges).toHaveLength(ids.length);
    expect(ledger.body.data.items.reduce((s: number, e: any) => s + e.amount, 0)).toBe(1_000_000 - expected);
  };
  const b = await startGatewayProcess(env, procs);
  await check(b.url);
  expect(segments()).toEqual([]);
  b.proc.kill(9);
  await b.proc.exited;
  // A second restart replays nothing more.
  const c = await startGatewayProcess(env, procs);
  await check(c.url);
  c.proc.kill(9);
  await c.proc.exited;
}, 60_000);

test('a second live gateway process on the same database is refused at start-up', async () => {
  const first = await startGatewayProcess(env, procs);
  try {
    const second = Bun.spawn([process.execPath, 'run', 'apps/server/src/index.ts'], {
      cwd: join(import.meta.dir, '..', '..'), env: { ...process.env, ...env }, stdout: 'pipe', stderr: 'pipe',
    });
    procs.add(second);
    expect(await second.exited).toBe(1);
    expect(await new Response(second.stderr).text()).toContain(`another gateway process (pid ${first.proc.pid}) is using this database`);
  } finally {
    first.proc.kill('SIGTERM');
    expect(await first.proc.exited).toBe(0);
  }
  // A clean stop gives ownership up; the next process starts.
  const next = await startGatewayProcess(env, procs);
  next.proc.kill(9);
  await next.proc.exited;
}, 30_000);
