/**
 * The SQLite history reader is a child process of the gateway: it gets only the environment it needs (none of
 * the gateway's secrets: SECRET_KEY, ROOT_PASSWORD, payment keys, DATABASE_URL), and it does not outlive the
 * gateway, even one killed with -9 while the reader runs a long statement. Real gateway processes, real HTTP.
 */
import { afterAll, expect, test } from 'bun:test';
import { Database } from 'bun:sqlite';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loginToken, startGatewayProcess } from '../helpers/gateway-process';
import { seedUsageRows } from '../helpers/usage-seed';

const dir = mkdtempSync(join(tmpdir(), 'gw-history-reader-'));
const procs = new Set<Bun.Subprocess>();
afterAll(async () => {
  for (const p of procs) { p.kill(9); await p.exited; }
  rmSync(dir, { recursive: true, force: true });
});

const environ = (pid: number) => Object.fromEntries(readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').filter(Boolean).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
const childrenOf = (pid: number) => readdirSync(`/proc/${pid}/task`).flatMap((t) => readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number));
const alive = (pid: number) => { try { return !readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.startsWith('Z'); } catch { return false; } };
/** utime + stime of a process, in clock ticks (1/100 s). */
const cpuTicks = (pid: number) => { const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' '); return Number(f[11]) + Number(f[12]); };
const SECRET = 'ab'.repeat(32);
const FROM = Date.UTC(2026, 0, 1) / 1000;

async function gateway(name: string, env: Record<string, string> = {}) {
  const g = await startGatewayProcess({
    DATABASE_URL: `sqlite:${join(dir, name)}`, PORT: '0', HOST: '127.0.0.1', ROOT_PASSWORD: 'root-password-123', SECRET_KEY: SECRET,
    PROVIDER_A_SECRET_KEY: 'sk-provider-secret', PROVIDER_A_WEBHOOK_SECRET: 'whsec-provider-secret', ...env,
  }, procs);
  return { ...g, token: await loginToken(g.url, 'root', 'root-password-123') };
}

test.skipIf(process.platform !== 'linux')('the reader process gets none of the gateway\'s secrets in its environment', async () => {
  const g = await gateway('env.db');
  expect((await fetch(`${g.url}/api/log/self`, { headers: { authorization: `Bearer ${g.token}` } })).status).toBe(200);
  const [reader] = childrenOf(g.proc.pid);
  expect(reader).toBeDefined();
  const env = environ(reader!);
  for (const name of ['SECRET_KEY', 'ROOT_PASSWORD', 'PROVIDER_A_SECRET_KEY', 'DATABASE_URL']) expect(env[name]).toBeUndefined();
  expect(JSON.stringify(env)).not.toContain(SECRET);
  // It still reads: a listing through it is served.
  expect((await fetch(`${g.url}/api/log/self?page_size=1`, { headers: { authorization: `Bearer ${g.token}` } })).status).toBe(200);
  g.proc.kill('SIGTERM');
  expect(await g.proc.exited).toBe(0);
  // A graceful stop takes its reader with it.
  await Bun.sleep(200);
  expect(alive(reader!)).toBe(false);
}, 30_000);

test.skipIf(process.platform !== 'linux')('a gateway killed with -9 while its reader runs a long statement leaves no reader running', async () => {
  const file = join(dir, 'kill.db');
  let g = await gateway('kill.db');
  g.proc.kill('SIGTERM');
  await g.proc.exited;
  const db = new Database(file);
  seedUsageRows(db, { rows: 600_000, from: FROM, spanSeconds: 300 * 86_400, users: 3 });
  db.close();
  g = await gateway('kill.db', { HISTORY_QUERY_TIMEOUT_MS: '600000' });
  const h = { authorization: `Bearer ${g.token}` };
  expect((await fetch(`${g.url}/api/log/self?page_size=1`, { headers: h })).status).toBe(200);
  const [reader] = childrenOf(g.proc.pid);
  expect(reader).toBeDefined();
  // Every row, daily by key and model: seconds of aggregate on the statistics' reader.
  void fetch(`${g.url}/api/log/stats?start_timestamp=${FROM}&end_timestamp=${FROM + 299 * 86_400}&granularity=day&group_by=key`, { headers: h }).catch(() => {});
  let stats: number | undefined;
  for (let i = 0; i < 100 && stats === undefined; i++) { await Bun.sleep(20); stats = childrenOf(g.proc.pid).find((p) => p !== reader); }
  expect(stats).toBeDefined();
  // Mid-statement: the reader has spent half a second of CPU on it.
  while (cpuTicks(stats!) < 50) await Bun.sleep(20);
  const t = performance.now();
  g.proc.kill(9);
  await g.proc.exited;
  while ((alive(stats!) || alive(reader!)) && performance.now() - t < 10_000) await Bun.sleep(25);
  const ms = performance.now() - t;
  console.log(`readers gone ${ms.toFixed(0)} ms after the gateway's kill -9`);
  expect(alive(stats!)).toBe(false);
  expect(alive(reader!)).toBe(false);
  expect(ms).toBeLessThan(1_500);
}, 60_000);
