/**
 * A /v1/messages stream cut by the gateway's death is billed once (SQLite): a stream that has run for a second keeps a
 * checkpoint of what it would be billed were it cut now, refreshed every second; a gateway process killed with
 * SIGKILL mid-stream bills it at its next start, exactly as a client leaving at that point is billed; a stream
 * settled before the kill is not billed again, and a further restart bills nothing more.
 */
import { Database } from 'bun:sqlite';
import { afterAll, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startAnthropicUpstream } from '../doubles/anthropic-upstream';
import { callJson, loginToken, startGatewayProcess } from '../helpers/gateway-process';
import { HELD_ANSWER, holdStreams, streamUntilPause } from '../helpers/held-stream';

const dir = mkdtempSync(join(tmpdir(), 'gw-msg-crash-'));
const dbPath = join(dir, 'gw.db');
const env = { DATABASE_URL: `sqlite:${dbPath}`, PORT: '0', HOST: '127.0.0.1', ROOT_PASSWORD: 'msg-crash-root-pw-1' };
const procs = new Set<Bun.Subprocess>();
const up = startAnthropicUpstream();
afterAll(async () => {
  for (const p of procs) p.kill(9);
  await up.stop();
  rmSync(dir, { recursive: true, force: true });
});

const BALANCE = 50_000_000;
holdStreams(up);

const peek = <T>(sql: string): T[] => {
  const db = new Database(dbPath, { readonly: true });
  try {
    return db.query(sql).all() as T[];
  } finally {
    db.close();
  }
};


test.skipIf(process.env.GW_TEST_BACKEND === 'pg')('SIGKILL mid-stream: the cut stream is billed once after the restart, as a client leaving then would be; the settled one not again', async () => {
  const a = await startGatewayProcess(env, procs);
  const token = await loginToken(a.url, 'root', env.ROOT_PASSWORD);
  expect((await callJson(a.url, 'POST', '/api/channel/', { name: 'up', type: 'anthropic', base_url: up.url, key: 'up-key-1', models: ['claude-crash'] }, token)).status).toBe(200);
  expect((await callJson(a.url, 'PUT', '/api/pricing/', { model: 'claude-crash', input: 3_000_000, output: 15_000_000 }, token)).status).toBe(200);
  const user = await callJson(a.url, 'POST', '/api/user/', { username: 'msg-crash-user', password: 'msg-crash-user-pw-1', quota: BALANCE }, token);
  const userId = user.body.data.id as number;
  const key = (await callJson(a.url, 'POST', '/api/token/', { name: 'k', user_id: userId }, token)).body.data.key as string;
  const logs = async (url: string, t: string) => (await callJson(url, 'GET', `/api/log/?user_id=${userId}&page_size=100`, undefined, t)).body.data.items as any[];

  // A complete stream, settled before the kill.
  const done = await fetch(`${a.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'claude-crash', max_tokens: 1000, stream: true, messages: [{ role: 'user', content: 'whole' }] }),
  });
  expect(await done.text()).toContain('message_stop');
  // The yardstick: the same stream left by its client at the same point.
  const left = await streamUntilPause(a.url, key, 'claude-crash', 'hold left');
  await left.cancel();
  let before: any[] = [];
  for (let i = 0; i < 50 && before.length < 2; i++) {
    await Bun.sleep(100);
    before = await logs(a.url, token);
  }
  const leftRow = before.find((l) => l.error_code === 'client_closed');
  expect(leftRow).toBeDefined();
  expect(leftRow.output_tokens).toBeGreaterThan(0);

  // The stream the kill cuts: two checkpoints (at 1 s and 2 s) before it.
  await streamUntilPause(a.url, key, 'claude-crash', 'hold crash');
  await Bun.sleep(2_500);
  expect(peek<{ n: number }>('select count(*) as n from realtime_unfinished')).toEqual([{ n: 1 }]);
  a.proc.kill(9);
  await a.proc.exited;
  expect(peek<{ n: number }>(`select count(*) as n from usage_logs where user_id = ${userId}`)).toEqual([{ n: 2 }]);

  const check = async (url: string) => {
    const t = await loginToken(url, 'root', env.ROOT_PASSWORD);
    const rows = await logs(url, t);
    expect(rows).toHaveLength(3);
    const crashed = rows.filter((l) => l.error_code === 'gateway_crashed');
    expect(crashed).toHaveLength(1);
    const [c] = crashed;
    // Billed as the client leaving at that point was: the input message_start reported, the output delivered.
    expect([c.input_tokens, c.output_tokens, c.cost, c.status, c.stream]).toEqual([leftRow.input_tokens, leftRow.output_tokens, leftRow.cost, 200, true]);
    expect(c.usage_flag).toBe(leftRow.usage_flag);
    const total = rows.reduce((n, l) => n + l.cost, 0);
    expect((await callJson(url, 'GET', `/api/user/${userId}`, undefined, t)).body.data.quota).toBe(BALANCE - total);
    const ledger = (await callJson(url, 'GET', `/api/ledger/?user_id=${userId}&page_size=100`, undefined, t)).body.data.items as any[];
    expect(ledger.filter((e) => e.kind === 'charge')).toHaveLength(3);
    expect(ledger.reduce((n, e) => n + e.amount, 0)).toBe(BALANCE - total);
    return total;
  };
  const b = await startGatewayProcess(env, procs);
  const total = await check(b.url);
  expect(peek('select 1 from realtime_unfinished')).toEqual([]);
  b.proc.kill(9);
  await b.proc.exited;
  // A second restart bills nothing more.
  const c = await startGatewayProcess(env, procs);
  expect(await check(c.url)).toBe(total);
  c.proc.kill(9);
  await c.proc.exited;
}, 60_000);

test.skipIf(process.env.GW_TEST_BACKEND === 'pg')('a stream settled normally leaves no checkpoint behind, however long it ran', async () => {
  const g = await startGatewayProcess({ ...env, DATABASE_URL: `sqlite:${join(dir, 'gw2.db')}` }, procs);
  const token = await loginToken(g.url, 'root', env.ROOT_PASSWORD);
  expect((await callJson(g.url, 'POST', '/api/channel/', { name: 'up', type: 'anthropic', base_url: up.url, key: 'up-key-1', models: ['claude-crash'] }, token)).status).toBe(200);
  expect((await callJson(g.url, 'PUT', '/api/pricing/', { model: 'claude-crash', input: 3_000_000, output: 15_000_000 }, token)).status).toBe(200);
  const user = await callJson(g.url, 'POST', '/api/user/', { username: 'msg-crash-user2', password: 'msg-crash-user-pw-2', quota: BALANCE }, token);
  const key = (await callJson(g.url, 'POST', '/api/token/', { name: 'k', user_id: user.body.data.id }, token)).body.data.key as string;
  up.script(() => ({ text: HELD_ANSWER, chunkDelayMs: 150 }));
  const res = await fetch(`${g.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'claude-crash', max_tokens: 1000, stream: true, messages: [{ role: 'user', content: 'slow' }] }),
  });
  const t0 = performance.now();
  expect(await res.text()).toContain('message_stop');
  expect(performance.now() - t0).toBeGreaterThan(1_500);
  await Bun.sleep(300);
  const db = new Database(join(dir, 'gw2.db'), { readonly: true });
  try {
    expect(db.query('select count(*) as n from realtime_unfinished').all()).toEqual([{ n: 0 }]);
    expect(db.query(`select error_code, usage_flag from usage_logs where user_id = ${user.body.data.id}`).all()).toEqual([{ error_code: '', usage_flag: '' }]);
  } finally {
    db.close();
  }
  g.proc.kill(9);
  await g.proc.exited;
}, 30_000);
