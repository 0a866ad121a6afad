/**
 * Realtime metering survives a kill (SQLite): a gateway process killed with SIGKILL while a realtime response
 * runs bills that response once when it starts again on the same database, on the estimate of what it had
 * relayed (its checkpoint: at its response.created, at its first output, then at most a second behind its
 * output); a response settled before the kill is not billed again, and a further restart bills nothing more.
 */
import { Database } from 'bun:sqlite';
import { afterAll, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { costOf } from '@gw/core';
import { RealtimeTestClient, startRealtimeUpstream } from '../doubles/realtime-upstream';
import { callJson, loginToken, startGatewayProcess } from '../helpers/gateway-process';
import { PRICE, SAMPLE_COST, bearerOf, leaveResponsesRunning, type OpenSession } from '../helpers/realtime-wiring';

const dir = mkdtempSync(join(tmpdir(), 'gw-rt-crash-'));
const dbPath = join(dir, 'gw.db');
const env = { DATABASE_URL: `sqlite:${dbPath}`, PORT: '0', HOST: '127.0.0.1', ROOT_PASSWORD: 'rt-crash-root-pw-1', REALTIME_DEFAULT_MODEL: 'gpt-realtime' };
const procs = new Set<Bun.Subprocess>();
const clients: RealtimeTestClient[] = [];
const up = startRealtimeUpstream();
afterAll(async () => {
  for (const c of clients) if (c.ws.readyState <= 1) c.ws.close();
  for (const p of procs) p.kill(9);
  await up.stop();
  rmSync(dir, { recursive: true, force: true });
});

const BALANCE = 50_000_000;
const peek = <T>(sql: string): T[] => {
  const db = new Database(dbPath, { readonly: true });
  try {
    return db.query(sql).all() as T[];
  } finally {
    db.close();
  }
};

async function connect(url: string, key: string): Promise<OpenSession> {
  const c = new RealtimeTestClient(`${url.replace('http://', 'ws://')}/v1/realtime?model=gpt-realtime`, bearerOf(key));
  clients.push(c);
  await c.opened;
  await c.waitFor('session.created');
  return { c, conn: up.connections.at(-1)!.id };
}

// The SQLite mechanism, whatever GW_TEST_BACKEND says: run once (the PostgreSQL runs would repeat it unchanged).
test.skipIf(process.env.GW_TEST_BACKEND === 'pg')('SIGKILL mid-response: the cut responses are billed once after the restart, the settled one not again', async () => {
  const a = await startGatewayProcess(env, procs);
  const token = await loginToken(a.url, 'root', env.ROOT_PASSWORD);
  expect((await callJson(a.url, 'POST', '/api/channel/', { name: 'rt', type: 'openai', base_url: up.url, key: 'up-key-1', models: ['gpt-realtime'] }, token)).status).toBe(200);
  expect((await callJson(a.url, 'PUT', '/api/pricing/', { ...PRICE, cache_write: 0 }, token)).status).toBe(200);
  const user = await callJson(a.url, 'POST', '/api/user/', { username: 'rt-crash-user', password: 'rt-crash-user-pw-1', quota: BALANCE }, token);
  const userId = user.body.data.id as number;
  const key = (await callJson(a.url, 'POST', '/api/token/', { name: 'k', user_id: userId }, token)).body.data.key as string;

  // Session 1: a response completed (settled before the kill), then one cut by the kill after all its output;
  // session 2: a response the upstream started itself (server VAD), killed before any output.
  const { cutId } = await leaveResponsesRunning(up, () => connect(a.url, key));
  // The three deltas came in one burst: the first was checkpointed at once, the rest within a second.
  await Bun.sleep(2000);
  a.proc.kill(9);
  await a.proc.exited;

  // Dead process: only the settled response has a usage row; the running ones are left as checkpoints.
  expect(peek<{ cost: number }>(`select cost from usage_logs where user_id = ${userId}`)).toEqual([{ cost: SAMPLE_COST }]);
  expect(peek<{ request_id: string }>('select request_id from realtime_unfinished order by request_id').map((r) => r.request_id.split('_').slice(2).join('_')).sort())
    .toEqual([cutId, 'resp_vad_kill'].sort());

  const check = async (url: string) => {
    const t = await loginToken(url, 'root', env.ROOT_PASSWORD);
    const logs = (await callJson(url, 'GET', `/api/log/?user_id=${userId}&page_size=100`, undefined, t)).body.data.items as any[];
    const byId = (suffix: string) => logs.filter((l) => l.request_id.endsWith(`_${suffix}`));
    expect(logs).toHaveLength(3);
    expect(byId('resp_1').map((l) => [l.cost, l.usage_flag, l.error_code])).toEqual([[SAMPLE_COST, '', '']]);
    // The cut response: its three deltas ("Hello", " from", " the double": 2 + 2 + 3 tokens) and an input bound.
    const [cut] = byId(cutId);
    expect([cut.output_tokens, cut.usage_flag, cut.error_code]).toEqual([7, 'estimated', 'gateway_crashed']);
    expect(cut.input_tokens).toBeGreaterThan(1024);
    expect(cut.input_tokens).toBeLessThan(PRICE.context_window);
    // The first response's output, read back as input, has audio: billed at the audio input price.
    expect(cut.audio_input_tokens).toBe(82);
    expect(cut.cost).toBe(costOf([[cut.input_tokens, PRICE.input], [cut.audio_input_tokens, PRICE.audio_input], [7, PRICE.output]]));
    // The upstream's own response, no output relayed: its input, nothing else.
    const [vad] = byId('resp_vad_kill');
    expect([vad.output_tokens, vad.usage_flag, vad.error_code]).toEqual([0, 'estimated', 'gateway_crashed']);
    expect(vad.cost).toBe(costOf([[vad.input_tokens, PRICE.input], [vad.audio_input_tokens, PRICE.audio_input]]));
    const total = logs.reduce((n, l) => n + l.cost, 0);
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
