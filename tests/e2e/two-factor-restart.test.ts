/**
 * The day and 30-day caps on wrong 2FA codes (TOTP_MAX_FAILURES_PER_DAY / _PER_30_DAYS) are counted per
 * credential. In SQLite mode they lived in the process: a stolen session that had used up its guesses got a fresh
 * day and 30 days after any restart (a deploy, a crash it caused). Now they are kept in the database, so a real
 * gateway process restarted between the guesses still refuses the next check, for both windows.
 * SQLite only: PostgreSQL mode keeps them in Redis, shared by the nodes (they outlive any node's restart).
 */
import { afterAll, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generate } from 'otplib';
import { callJson, loginToken, startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { clearOfWindowEdge } from '../helpers/window-edge';

const dir = mkdtempSync(join(tmpdir(), 'gw-2fa-restart-'));
const ROOT_PW = 'restart-2fa-root-pw-1';
const base = { DATABASE_URL: `sqlite:${join(dir, 'gw.db')}`, PORT: '0', HOST: '127.0.0.1', ROOT_PASSWORD: ROOT_PW, LOG_REQUESTS: 'false' };
const procs = new Set<Bun.Subprocess>();
afterAll(() => {
  for (const p of procs) p.kill(9);
  rmSync(dir, { recursive: true, force: true });
});

async function restart(gw: GatewayProcess, env: Record<string, string>): Promise<GatewayProcess> {
  gw.proc.kill('SIGTERM');
  await gw.proc.exited;
  return startGatewayProcess({ ...base, ...env }, procs);
}

const totp = (secret: string, steps = 0) => generate({ secret, epoch: Math.floor(Date.now() / 1000) + steps * 30 });

async function login(url: string, username: string, password: string, totp_code?: string) {
  const res = await fetch(`${url}/api/user/login`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username, password, ...(totp_code ? { totp_code } : {}) }),
  });
  expect(res.status).toBe(200);
  return res.headers.get('set-cookie')!.split(';')[0]!;
}

test('a restart between guesses gives a stolen session no new day or 30 days of 2FA checks', async () => {
  let gw = await startGatewayProcess({ ...base, TOTP_MAX_FAILURES_PER_DAY: '3' }, procs);
  const root = await loginToken(gw.url, 'root', ROOT_PW);
  const password = 'owner-pw-2fa-restart-1';
  const made = await callJson(gw.url, 'POST', '/api/user/', { username: 'owner2fa', password }, root);
  expect(made.status).toBe(200);
  const ownerCookie = await login(gw.url, 'owner2fa', password);
  const setup = await callJson(gw.url, 'POST', '/api/user/2fa/setup', undefined, undefined, { cookie: ownerCookie });
  const secret = setup.body.data.secret as string;
  await clearOfWindowEdge(3_000, 30_000);
  const en = await callJson(gw.url, 'POST', '/api/user/2fa/enable', { code: await totp(secret, -1), current_password: password }, undefined, { cookie: ownerCookie });
  expect(en.status).toBe(200);
  const backup = en.body.data.backup_codes as string[];
  // The thief's copy of a session the owner opened with both factors.
  const stolen = await login(gw.url, 'owner2fa', password, await totp(secret, 0));
  const disable = (url: string, code: string) => callJson(url, 'POST', '/api/user/2fa/disable', { code }, undefined, { cookie: stolen });

  // The day window is aligned to the clock: keep the guesses and the checks after them inside one.
  await clearOfWindowEdge(60_000, 86_400_000);
  await clearOfWindowEdge(60_000, 30 * 86_400_000);
  for (let i = 0; i < 3; i++) expect((await disable(gw.url, `00000${i}`)).status).toBe(400);
  expect((await disable(gw.url, '000009')).status).toBe(429);

  // Restarted: the day's three are still counted, so even a right backup code is not checked.
  gw = await restart(gw, { TOTP_MAX_FAILURES_PER_DAY: '3' });
  const afterRestart = await disable(gw.url, backup[0]!);
  expect([afterRestart.status, afterRestart.body.error?.code]).toEqual([429, 'too_many_attempts']);
  expect(Number(afterRestart.headers.get('retry-after'))).toBeGreaterThan(30);

  // Restarted with a day cap out of reach and a 30-day cap of 3: the 30-day window kept the same three.
  gw = await restart(gw, { TOTP_MAX_FAILURES_PER_DAY: '100', TOTP_MAX_FAILURES_PER_30_DAYS: '3' });
  const month = await disable(gw.url, backup[0]!);
  expect([month.status, month.body.error?.code]).toEqual([429, 'too_many_attempts']);

  // Still on: the owner's 2FA was never turned off by the guessing session.
  const status = await callJson(gw.url, 'GET', '/api/user/2fa/status', undefined, undefined, { cookie: ownerCookie });
  expect(status.body.data.enabled).toBe(true);
  gw.proc.kill('SIGTERM');
  await gw.proc.exited;
}, 120_000); // the day edge's wait (up to 60 s) and three starts
