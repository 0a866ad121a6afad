/**
 * A throw no handler caught, or a rejection nobody awaited, no longer ends the gateway's process (and every stream
 * and realtime session on it): it is logged as `process.uncaught` and counted, and the process serves on. A graceful
 * stop that fails still ends it. Real server processes, with the faults injected from preloaded files.
 */
import { afterAll, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { callJson, loginToken } from '../helpers/gateway-process';

const ROOT = join(import.meta.dir, '..', '..');
const dir = mkdtempSync(join(tmpdir(), 'gw-uncaught-'));
const procs: Bun.Subprocess[] = [];
afterAll(() => {
  for (const p of procs) p.kill(9);
  rmSync(dir, { recursive: true, force: true });
});

/** A real server process with `fixture` preloaded; resolves once it listens, with its URL and its output so far. */
async function serverWith(fixture: string, name: string) {
  const proc = Bun.spawn([process.execPath, '--preload', join(ROOT, 'tests/fixtures', fixture), 'apps/server/src/index.ts'], {
    cwd: ROOT, stdin: 'ignore', stdout: 'pipe', stderr: 'pipe',
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', DATABASE_URL: `sqlite:${join(dir, `${name}.db`)}`, ROOT_PASSWORD: 'root-password-123' },
  });
  procs.push(proc);
  const io = { out: '', err: '' };
  const dec = new TextDecoder();
  void (async () => { for await (const c of proc.stdout) io.out += dec.decode(c); })();
  void (async () => { for await (const c of proc.stderr) io.err += dec.decode(c); })();
  const until = Date.now() + 15_000;
  while (!/listening url=/.test(io.out) && Date.now() < until && proc.exitCode === null) await Bun.sleep(20);
  const url = /listening url=(http:\/\/[^\s]+)/.exec(io.out)?.[1];
  expect(url).toBeDefined();
  return { proc, url: url!, io };
}

test('a stray throw and an unawaited rejection are logged and counted; the process serves on', async () => {
  const { proc, url, io } = await serverWith('inject-faults.ts', 'faults');
  proc.kill('SIGUSR2');
  const logged = Date.now() + 5_000;
  while (!(io.err.includes('kind=exception') && io.err.includes('kind=rejection')) && Date.now() < logged && proc.exitCode === null) await Bun.sleep(20);
  await Bun.sleep(200);
  expect(proc.exitCode).toBeNull();
  expect(io.err).toMatch(/error process\.uncaught kind=exception cause="injected fault in a timer"/);
  expect(io.err).toMatch(/error process\.uncaught kind=rejection cause="injected rejection nobody awaits"/);

  // Still serving, and the faults are counted.
  expect((await fetch(`${url}/health`)).status).toBe(200);
  const token = await loginToken(url, 'root', 'root-password-123');
  const metrics = await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${token}` } })).text();
  expect(metrics).toContain('gateway_uncaught_errors_total{kind="exception"} 1');
  expect(metrics).toContain('gateway_uncaught_errors_total{kind="rejection"} 1');
  expect((await callJson(url, 'GET', '/api/user/self', undefined, token)).status).toBe(200);
}, 30_000);

test('a graceful stop that fails still ends the process, with one error line', async () => {
  // Else the guard above would only log the failed stop's rejection, and a process that no longer listens would
  // ignore every later signal (a supervisor waiting for it until its kill).
  const { proc, io } = await serverWith('failing-stop.ts', 'stop');
  proc.kill('SIGTERM');
  const code = await Promise.race([proc.exited, Bun.sleep(10_000).then(() => 'still running')]);
  expect(code).toBe(1);
  expect(io.err).toMatch(/error shutdown\.failed [^]*injected stop failure/);
}, 30_000);
