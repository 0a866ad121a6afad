/**
 * The server process sizes Bun's outbound fetch limit (read only at start-up) to its upstream cap by
 * re-executing itself once, in place: same pid, BUN_CONFIG_MAX_HTTP_REQUESTS set, the cap reported.
 */
import { afterAll, expect, test } from 'bun:test';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loginToken, startGatewayProcess } from '../helpers/gateway-process';

const dir = mkdtempSync(join(tmpdir(), 'gw-fetch-limit-'));
const procs = new Set<Bun.Subprocess>();
afterAll(async () => {
  for (const p of procs) { p.kill('SIGTERM'); await p.exited; }
  rmSync(dir, { recursive: true, force: true });
});

const environ = (pid: number) => Object.fromEntries(readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').filter(Boolean).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));

test.skipIf(process.platform !== 'linux')('restarts in place with BUN_CONFIG_MAX_HTTP_REQUESTS = cap + 64; an operator value is kept', async () => {
  const base = { DATABASE_URL: `sqlite:${join(dir, 'a.db')}`, PORT: '0', HOST: '127.0.0.1', ROOT_PASSWORD: 'root-password-123', BUN_CONFIG_MAX_HTTP_REQUESTS: undefined };
  const a = await startGatewayProcess({ ...base, MAX_UPSTREAM_CONNECTIONS: '500' }, procs);
  // The pid Bun.spawn knows is the server itself: execve kept it.
  expect(environ(a.proc.pid).BUN_CONFIG_MAX_HTTP_REQUESTS).toBe('564');
  a.proc.kill('SIGTERM');
  expect(await a.proc.exited).toBe(0);

  const b = await startGatewayProcess({ ...base, MAX_UPSTREAM_CONNECTIONS: '500', BUN_CONFIG_MAX_HTTP_REQUESTS: '300' }, procs);
  expect(environ(b.proc.pid).BUN_CONFIG_MAX_HTTP_REQUESTS).toBe('300');
  const token = await loginToken(b.url, 'root', 'root-password-123');
  const res = await fetch(`${b.url}/metrics`, { headers: { authorization: `Bearer ${token}` } });
  expect(res.status).toBe(200);
  // Lowered to what Bun was started with, less the headroom, instead of queueing silently past it.
  expect(await res.text()).toContain('gateway_upstream_slots{state="max"} 236');
  b.proc.kill('SIGTERM');
  await b.proc.exited;
}, 30_000);
