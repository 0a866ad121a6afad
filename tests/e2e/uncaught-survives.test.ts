/**
 * A throw no handler caught, or a rejection nobody awaited, no longer ends the gateway's process (and every stream
 * and realtime session on it): it is logged as `process.uncaught` and counted, and the process serves on. A real
 * server process, with the two faults injected from a preloaded file on a signal.
 */
import { afterAll, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { callJson, loginToken } from '../helpers/gateway-process';

const ROOT = join(import.meta.dir, '..', '..');
const dir = mkdtempSync(join(tmpdir(), 'gw-uncaught-'));
let proc: Bun.Subprocess<'ignore', 'pipe', 'pipe'> | null = null;
afterAll(() => {
  proc?.kill(9);
  rmSync(dir, { recursive: true, force: true });
});

test('a stray throw and an unawaited rejection are logged and counted; the process serves on', async () => {
  proc = Bun.spawn([process.execPath, '--preload', join(ROOT, 'tests/fixtures/inject-faults.ts'), 'apps/server/src/index.ts'], {
    cwd: ROOT, stdin: 'ignore', stdout: 'pipe', stderr: 'pipe',
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', DATABASE_URL: `sqlite:${join(dir, 'gw.db')}`, ROOT_PASSWORD: 'root-password-123' },
  });
  let out = '';
  let err = '';
  const dec = new TextDecoder();
  void (async () => { for await (const c of proc!.stdout) out += dec.decode(c); })();
  void (async () => { for await (const c of proc!.stderr) err += dec.decode(c); })();
  const until = Date.now() + 15_000;
  while (!/listening url=/.test(out) && Date.now() < until && proc.exitCode === null) await Bun.sleep(20);
  const url = /listening url=(http:\/\/[^\s]+)/.exec(out)?.[1];
  expect(url).toBeDefined();

  proc.kill('SIGUSR2');
  const logged = Date.now() + 5_000;
  while (!(err.includes('kind=exception') && err.includes('kind=rejection')) && Date.now() < logged && proc.exitCode === null) await Bun.sleep(20);
  await Bun.sleep(200);
  expect(proc.exitCode).toBeNull();
  expect(err).toMatch(/error process\.uncaught kind=exception cause="injected fault in a timer"/);
  expect(err).toMatch(/error process\.uncaught kind=rejection cause="injected rejection nobody awaits"/);

  // Still serving, and the faults are counted.
  expect((await fetch(`${url}/health`)).status).toBe(200);
  const token = await loginToken(url!, 'root', 'root-password-123');
  const metrics = await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${token}` } })).text();
  expect(metrics).toContain('gateway_uncaught_errors_total{kind="exception"} 1');
  expect(metrics).toContain('gateway_uncaught_errors_total{kind="rejection"} 1');
  expect((await callJson(url!, 'GET', '/api/user/self', undefined, token)).status).toBe(200);
}, 30_000);
