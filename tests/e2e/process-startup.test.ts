/**
 * Process start-up with real gateway processes: the port is bound exclusively, the database is owned
 * through an OS lock that dies with its holder (kill -9 then an immediate restart works; a live second
 * process is refused), and the data folder and every file in it are private.
 */
import { afterAll, describe, expect, test } from 'bun:test';
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startAnthropicUpstream } from '../doubles/anthropic-upstream';
import { callJson, loginToken, startGatewayProcess } from '../helpers/gateway-process';

const ROOT = join(import.meta.dir, '..', '..');
const base = mkdtempSync(join(tmpdir(), 'gw-startup-'));
const procs = new Set<Bun.Subprocess>();
const upstream = startAnthropicUpstream();
afterAll(() => {
  for (const p of procs) p.kill(9);
  upstream.stop();
  rmSync(base, { recursive: true, force: true });
});

const envFor = (name: string, extra: Record<string, string> = {}) => ({
  DATABASE_URL: `sqlite:${join(base, name, 'gw.db')}`, PORT: '0', HOST: '127.0.0.1', ROOT_PASSWORD: 'startup-root-pw-1', ...extra,
});

/** Runs a gateway that is expected to stop at start-up; returns its exit code and stderr lines. */
async function failedStart(env: Record<string, string>): Promise<{ code: number; lines: string[] }> {
  const p = Bun.spawn([process.execPath, 'run', 'apps/server/src/index.ts'], { cwd: ROOT, env: { ...process.env, ...env }, stdout: 'pipe', stderr: 'pipe' });
  procs.add(p);
  const timer = setTimeout(() => p.kill(9), 15_000);
  const code = await p.exited;
  clearTimeout(timer);
  const lines = (await new Response(p.stderr).text()).split('\n').filter((l) => l.trim());
  return { code, lines };
}

/**
 * Starts a gateway under a parent that never reaps its children (`sleep` after `exec`): once killed,
 * the gateway lingers as a zombie, as it does under a busy or careless supervisor.
 */
async function startUnreaped(env: Record<string, string>): Promise<{ pid: number; url: string; wrapper: Bun.Subprocess }> {
  const wrapper = Bun.spawn(['sh', '-c', `"${process.execPath}" run apps/server/src/index.ts & echo "gateway-pid $!"; exec sleep 60`], {
    cwd: ROOT, env: { ...process.env, ...env }, stdout: 'pipe', stderr: 'ignore',
  });
  procs.add(wrapper);
  const reader = wrapper.stdout.getReader();
  let out = '';
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    const { done, value } = await reader.read();
    if (done) break;
    out += new TextDecoder().decode(value);
    const pid = /gateway-pid (\d+)/.exec(out);
    const url = /listening url=(https?:\/\/\S+)/.exec(out);
    if (pid && url) {
      reader.releaseLock();
      void wrapper.stdout.pipeTo(new WritableStream());
      return { pid: Number(pid[1]), url: url[1]!, wrapper };
    }
  }
  wrapper.kill(9);
  throw new Error(`gateway did not start: ${out}`);
}

describe('listening is exclusive', () => {
  test('a second gateway on a port in use exits 1 with one line naming the port', async () => {
    const a = await startGatewayProcess(envFor('port-a'), procs);
    const port = new URL(a.url).port;
    try {
      const b = await failedStart(envFor('port-b', { PORT: port }));
      expect(b.code).toBe(1);
      expect(b.lines).toHaveLength(1);
      expect(b.lines[0]).toContain(`port ${port}`);
      expect(b.lines[0]).toContain('in use');
      // The first gateway still answers every connection.
      for (let i = 0; i < 20; i++) expect((await fetch(`${a.url}/health`)).status).toBe(200);
    } finally {
      a.proc.kill(9);
      await a.proc.exited;
    }
  }, 30_000);
});

describe('one gateway process per database', () => {
  test('kill -9 then an immediate restart succeeds, several times in a row (the dead pid still lingers)', async () => {
    const env = envFor('restart');
    for (let i = 0; i < 3; i++) {
      const g = await startUnreaped(env);
      expect((await fetch(`${g.url}/health`)).status).toBe(200);
      process.kill(g.pid, 'SIGKILL');
      // The killed gateway stays a zombie (its parent never reaps it), so its pid still answers kill(pid, 0).
      const next = await startGatewayProcess(env, procs);
      expect((await fetch(`${next.url}/health`)).status).toBe(200);
      next.proc.kill(9);
      await next.proc.exited;
      g.wrapper.kill(9);
      await g.wrapper.exited;
    }
  }, 60_000);

  test('an owner file naming another live process (a recycled pid) does not block start-up', async () => {
    const env = envFor('stale-pid');
    const g0 = await startGatewayProcess(env, procs);
    g0.proc.kill(9);
    await g0.proc.exited;
    // The dead gateway's pid now belongs to some other live process (here: the test runner).
    writeFileSync(join(base, 'stale-pid', 'gw.db.settlements', 'owner.pid'), String(process.pid));
    const g = await startGatewayProcess(env, procs);
    expect((await fetch(`${g.url}/health`)).status).toBe(200);
    g.proc.kill(9);
    await g.proc.exited;
  }, 30_000);

  test('a second live process on the same database is refused with one line', async () => {
    const env = envFor('second');
    const first = await startGatewayProcess(env, procs);
    try {
      const second = await failedStart(env);
      expect(second.code).toBe(1);
      expect(second.lines).toHaveLength(1);
      expect(second.lines[0]).toContain(`another gateway process (pid ${first.proc.pid}) is using this database`);
      expect((await fetch(`${first.url}/health`)).status).toBe(200);
    } finally {
      first.proc.kill('SIGTERM');
      expect(await first.proc.exited).toBe(0);
    }
  }, 30_000);
});

describe('graceful stop', () => {
  test('SIGTERM as soon as the listening line appears is a clean stop (exit 0), every time', async () => {
    const env = envFor('sigterm');
    const codes: number[] = [];
    for (let i = 0; i < 5; i++) {
      const g = await startGatewayProcess(env, procs);
      g.proc.kill('SIGTERM');
      codes.push(await g.proc.exited);
    }
    expect(codes).toEqual([0, 0, 0, 0, 0]);
  }, 60_000);

  test('a second signal during the stop (a supervisor or `bun run` forwarding it) is ignored: exit 0, nothing on stderr', async () => {
    const g = await startGatewayProcess(envFor('sigterm-twice'), procs);
    g.proc.kill('SIGTERM');
    await Bun.sleep(5);
    g.proc.kill('SIGINT');
    expect(await g.proc.exited).toBe(0);
    expect(await new Response(g.proc.stderr).text()).toBe('');
  }, 30_000);
});

describe('files at rest are private', () => {
  const modeOf = (p: string) => statSync(p).mode & 0o777;

  test('data folder 0700 and every file in it 0600, after start-up and after traffic', async () => {
    const dataDir = join(base, 'modes', 'data');
    const env = { ...envFor('modes'), DATABASE_URL: `sqlite:${join(dataDir, 'gw.db')}`, BILLING_FLUSH_MS: '60000' };
    const expectPrivate = () => {
      expect(modeOf(dataDir)).toBe(0o700);
      const seen: string[] = [];
      const walk = (dir: string) => {
        for (const f of readdirSync(dir, { withFileTypes: true })) {
          const p = join(dir, f.name);
          if (f.isDirectory()) {
            expect({ p, mode: modeOf(p) }).toEqual({ p, mode: 0o700 });
            walk(p);
          } else {
            expect({ p, mode: modeOf(p) }).toEqual({ p, mode: 0o600 });
            seen.push(p.slice(dataDir.length + 1));
          }
        }
      };
      walk(dataDir);
      return seen;
    };
    const g = await startGatewayProcess(env, procs);
    const atStart = expectPrivate();
    expect(atStart).toEqual(expect.arrayContaining(['gw.db', 'gw.db-wal', 'gw.db-shm', 'gw.db.lock', 'secret.key']));

    // Traffic: management writes (WAL grows) and metered requests (journal segments, not yet flushed).
    upstream.script(() => ({ text: 'ok', usage: { input: 3, output: 2 } }));
    const token = await loginToken(g.url, 'root', 'startup-root-pw-1');
    expect((await callJson(g.url, 'POST', '/api/channel/', { name: 'c', type: 'anthropic', base_url: upstream.url, key: 'up-key-1', models: ['mode-model'] }, token)).status).toBe(200);
    expect((await callJson(g.url, 'PUT', '/api/pricing/', { model: 'mode-model', input: 1_000_000, output: 1_000_000, cache_read: 0, cache_write: 0 }, token)).status).toBe(200);
    const user = await callJson(g.url, 'POST', '/api/user/', { username: 'mode-user', password: 'mode-user-pw-1', quota: 1_000_000 }, token);
    const key = (await callJson(g.url, 'POST', '/api/token/', { name: 'k', user_id: user.body.data.id }, token)).body.data.key as string;
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${g.url}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': key, 'anthropic-version': '2023-06-01' },
        body: JSON.stringify({ model: 'mode-model', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(res.status).toBe(200);
      await res.text();
    }
    const afterTraffic = expectPrivate();
    expect(afterTraffic.some((f) => /^gw\.db\.settlements\/settle-\d+\.jsonl$/.test(f))).toBe(true);
    g.proc.kill(9);
    await g.proc.exited;

    // A restart (replaying the journal) keeps everything private too.
    const g2 = await startGatewayProcess(env, procs);
    expectPrivate();
    g2.proc.kill('SIGTERM');
    expect(await g2.proc.exited).toBe(0);
    expectPrivate();
  }, 60_000);
});
