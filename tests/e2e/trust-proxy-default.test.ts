import { afterAll, beforeAll, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { callJson, startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { clearOfWindowEdge } from '../helpers/window-edge';

/**
 * TRUST_PROXY on, TRUST_PROXY_HOPS unset, behind a proxy that appends to X-Forwarded-For (nginx's default form):
 * the client's own header stays on the left. Taking the leftmost entry let a client name a new address on every
 * request, past the per-address login limit (and allow_ips, and every logged address). The default is now the
 * rightmost entry, the one the proxy wrote. A real process, as the setting is read at start-up.
 */
const dir = mkdtempSync(join(tmpdir(), 'gw-trust-proxy-'));
const procs = new Set<Bun.Subprocess>();
let gw: GatewayProcess;
beforeAll(async () => {
  gw = await startGatewayProcess({
    DATABASE_URL: `sqlite:${join(dir, 'gateway.db')}`, PORT: '0', HOST: '127.0.0.1', ROOT_PASSWORD: 'trust-proxy-root-1',
    TRUST_PROXY: 'true', TRUST_PROXY_HOPS: '', LOGIN_IP_PER_MINUTE: '3', LOGIN_MAX_FAILURES: '100',
  }, procs);
}, 60_000);
afterAll(async () => {
  for (const p of procs) p.kill('SIGKILL');
  await Promise.all([...procs].map((p) => p.exited));
  rmSync(dir, { recursive: true, force: true });
});

test('a client spoofing the leftmost X-Forwarded-For entry still counts as the address its proxy saw', async () => {
  await clearOfWindowEdge(30_000); // all in one minute window, with room for a loaded machine
  const statuses: number[] = [];
  for (let n = 0; n < 4; n++) {
    // What an appending proxy forwards: the client's claim, then the peer it saw.
    const xff = `203.0.113.${n + 1}, 198.51.100.77`;
    const r = await callJson(gw.url, 'POST', '/api/user/login', { username: `nobody-${n}`, password: 'wrong-password' }, undefined, { 'x-forwarded-for': xff });
    statuses.push(r.status);
  }
  expect(statuses).toEqual([401, 401, 401, 429]);
  // Another client behind the same proxy is another address.
  const other = await callJson(gw.url, 'POST', '/api/user/login', { username: 'nobody-x', password: 'wrong-password' }, undefined, { 'x-forwarded-for': '203.0.113.1, 198.51.100.78' });
  expect(other.status).toBe(401);
}, 90_000);
