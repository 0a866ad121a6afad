/**
 * Durability: a real gateway process (`bun run apps/server/src/index.ts`) is killed with SIGKILL, or
 * stopped with SIGTERM, and restarted on the same database; every committed record must be there.
 */
import { afterAll, describe, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { callJson, startGatewayProcess } from '../helpers/gateway-process';

const dir = mkdtempSync(join(tmpdir(), 'gw-restart-'));
const env = { DATABASE_URL: `sqlite:${join(dir, 'gw.db')}`, PORT: '0', HOST: '127.0.0.1', ROOT_PASSWORD: 'restart-root-pw-1', LOG_REQUESTS: 'false' };
const procs = new Set<Bun.Subprocess>();
afterAll(() => {
  for (const p of procs) p.kill(9);
  rmSync(dir, { recursive: true, force: true });
});
const startProcess = () => startGatewayProcess(env, procs);
const call = callJson;

describe('restart keeps every committed record', () => {
  test('SIGKILL, then SIGTERM, then restart on the same database', async () => {
    const seenKeys: string[] = [];
    const upstream = Bun.serve({
      port: 0, hostname: '127.0.0.1',
      fetch(req) {
        seenKeys.push(req.headers.get('x-api-key') ?? '');
        return Response.json({ id: 'msg_1', type: 'message', role: 'assistant', model: 'm', content: [], stop_reason: 'end_turn', usage: { input_tokens: 1, output_tokens: 1 } });
      },
    });
    try {
      // First life: write records, then die without any chance to clean up.
      const a = await startProcess();
      const login = await fetch(`${a.url}/api/user/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'root', password: 'restart-root-pw-1' }) });
      expect(login.status).toBe(200);
      const cookie = login.headers.get('set-cookie')!.split(';')[0]!;
      const tokRes = await fetch(`${a.url}/api/user/access_token`, { method: 'POST', headers: { 'content-type': 'application/json', cookie }, body: JSON.stringify({ name: 'restart', current_password: 'restart-root-pw-1' }) });
      const token = ((await tokRes.json()) as any).data.token as string;
      const ch = await call(a.url, 'POST', '/api/channel/', { name: 'durable', type: 'anthropic', base_url: `http://127.0.0.1:${upstream.port}`, key: 'sk-upstream-durable-1', models: ['m1'], tag: 'keep' }, token);
      expect(ch.status).toBe(200);
      expect((await call(a.url, 'PUT', '/api/channel/', { id: ch.body.data.id, priority: 7, status: 2 }, token)).status).toBe(200);
      const user = await call(a.url, 'POST', '/api/user/', { username: 'durable-user', password: 'durable-pw-123', quota: 777, group: 'vip' }, token);
      expect(user.status).toBe(200);
      const key = await call(a.url, 'POST', '/api/token/', { name: 'durable-key', user_id: user.body.data.id, allow_ips: ['10.0.0.0/8'] }, token);
      expect(key.status).toBe(200);
      const gone = await call(a.url, 'POST', '/api/user/', { username: 'disabled-user', password: 'durable-pw-123' }, token);
      expect((await call(a.url, 'POST', `/api/user/${gone.body.data.id}/disable`, undefined, token)).status).toBe(200);
      a.proc.kill(9);
      expect(await a.proc.exited).not.toBe(0);

      const check = async (url: string) => {
        const c = await call(url, 'GET', `/api/channel/${ch.body.data.id}`, undefined, token);
        expect(c.status).toBe(200);
        expect(c.body.data).toMatchObject({ name: 'durable', priority: 7, status: 2, tag: 'keep', models: ['m1'] });
        // The sealed key still opens after a restart (the secret key persisted beside the database).
        const t = await call(url, 'POST', `/api/channel/${ch.body.data.id}/test`, undefined, token);
        expect(t.body.data.success).toBe(true);
        expect(seenKeys.at(-1)).toBe('sk-upstream-durable-1');
        const u = await call(url, 'GET', `/api/user/${user.body.data.id}`, undefined, token);
        expect(u.body.data).toMatchObject({ username: 'durable-user', quota: 777, group: 'vip', status: 1 });
        const d = await call(url, 'GET', `/api/user/${gone.body.data.id}`, undefined, token);
        expect(d.body.data.status).toBe(2);
        const k = await call(url, 'GET', `/api/token/?user_id=${user.body.data.id}`, undefined, token);
        expect(k.body.data.items).toHaveLength(1);
        expect(k.body.data.items[0]).toMatchObject({ name: 'durable-key', allow_ips: ['10.0.0.0/8'], prefix: key.body.data.key.slice(0, 8) });
        expect((await fetch(`${url}/api/user/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'durable-user', password: 'durable-pw-123' }) })).status).toBe(200);
      };

      // Second life after SIGKILL; then a graceful stop.
      const b = await startProcess();
      await check(b.url);
      b.proc.kill('SIGTERM');
      expect(await b.proc.exited).toBe(0);

      // Third life after SIGTERM.
      const c = await startProcess();
      await check(c.url);
      c.proc.kill(9);
      await c.proc.exited;
    } finally {
      upstream.stop(true);
    }
  }, 60_000);
});
