/**
 * deploy/haproxy.cfg run for real (no Docker): the same file, with each `server <node> <node>:<port>` line
 * pointed at a local stand-in for that node and the bind address made local, in front of three small Bun
 * servers. Checks what the cluster relies on: requests alternate over every node, a client's own
 * X-Forwarded-For is replaced, SSE chunks pass unbuffered, and /v1/realtime WebSockets are upgraded and
 * spread over the nodes. Skipped with one line when no haproxy binary is installed.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const ROOT = join(import.meta.dir, '..', '..');
const HAPROXY = Bun.which('haproxy');
if (!HAPROXY) console.warn('SKIPPED tests/deploy/haproxy-live.test.ts: no haproxy binary (apt-get install haproxy)');

type Node = { name: string; server: ReturnType<typeof Bun.serve> };
const nodes: Node[] = [];
let proxy: Bun.Subprocess | null = null;
let url = '';
let dir = '';

function freePort(): number {
  const s = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

/** A stand-in node: names itself, echoes the X-Forwarded-For it got, streams slowly, accepts realtime WebSockets. */
function standIn(name: string): Node {
  const server = Bun.serve<{ node: string }>({
    hostname: '127.0.0.1',
    port: 0,
    fetch(req, srv) {
      // Like the gateway, answer a request without a Host header too (req.url is then only the path).
      const path = new URL(req.url, 'http://node').pathname;
      if (path === '/health') return Response.json({ status: 'ok' });
      if (path === '/v1/realtime') return srv.upgrade(req, { data: { node: name } }) ? undefined : new Response('upgrade expected', { status: 426 });
      if (path === '/sse') {
        const enc = new TextEncoder();
        return new Response(new ReadableStream({
          async start(c) {
            c.enqueue(enc.encode('event: ping\ndata: {}\n\n'));
            await Bun.sleep(1500);
            c.enqueue(enc.encode('event: message_stop\ndata: {}\n\n'));
            c.close();
          },
        }), { headers: { 'content-type': 'text/event-stream' } });
      }
      return Response.json({ node: name, xff: req.headers.get('x-forwarded-for') });
    },
    websocket: {
      open(ws) { ws.send(JSON.stringify({ node: ws.data.node })); },
      message(ws, msg) { ws.send(`echo:${msg}`); },
    },
  });
  return { name, server };
}

beforeAll(async () => {
  if (!HAPROXY) return;
  const original = await Bun.file(join(ROOT, 'deploy', 'haproxy.cfg')).text();
  const names = [...original.matchAll(/^\s*server\s+(\S+)\s+(\S+):(\d+)/gm)].map((m) => m[1]!);
  for (const n of names) nodes.push(standIn(n));
  const port = freePort();
  // Only addresses change: the node names resolve through Docker's DNS inside compose, here they are local ports.
  const local = original
    .replace(/^(\s*bind\s+)\S*:(\d+)/m, `$1127.0.0.1:${port}`)
    .replace(/^(\s*server\s+(\S+)\s+)\S+:\d+/gm, (_, head, name) => `${head}127.0.0.1:${nodes.find((n) => n.name === name)!.server.port}`)
    .replace(/^resolvers docker[\s\S]*?(?=^\S)/m, '')
    .replace(/\s+resolvers docker\b/g, '');
  dir = mkdtempSync(join(tmpdir(), 'gw-haproxy-'));
  writeFileSync(join(dir, 'haproxy.cfg'), local);
  proxy = Bun.spawn([HAPROXY, '-db', '-f', join(dir, 'haproxy.cfg')], { stdout: 'ignore', stderr: 'pipe' });
  url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 100; i++) {
    try {
      if ((await fetch(`${url}/health`)).status === 200) return;
    } catch { /* not listening yet */ }
    await Bun.sleep(100);
  }
  throw new Error(`haproxy did not answer: ${await new Response(proxy.stderr as ReadableStream).text()}`);
});

afterAll(async () => {
  if (proxy) {
    proxy.kill();
    await proxy.exited;
  }
  for (const n of nodes) n.server.stop(true);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(!HAPROXY)('deploy/haproxy.cfg in front of three nodes', () => {
  test('the config names three nodes', () => {
    expect(nodes.map((n) => n.name).sort()).toEqual(['gateway1', 'gateway2', 'gateway3']);
  });

  test('requests alternate round-robin over every node, also on one kept-alive connection', async () => {
    const seen: Record<string, number> = {};
    for (let i = 0; i < 30; i++) {
      const body = (await (await fetch(`${url}/v1/messages`, { method: 'POST', body: '{}' })).json()) as { node: string };
      seen[body.node] = (seen[body.node] ?? 0) + 1;
    }
    expect(seen).toEqual({ gateway1: 10, gateway2: 10, gateway3: 10 });
  });

  test("a client's own X-Forwarded-For is replaced by its real address", async () => {
    const body = (await (await fetch(`${url}/whoami`, { headers: { 'x-forwarded-for': '203.0.113.9' } })).json()) as { xff: string };
    expect(body.xff).toBe('127.0.0.1');
  });

  test('SSE chunks reach the client as the node sends them (no buffering)', async () => {
    const t0 = performance.now();
    const res = await fetch(`${url}/sse`);
    const reader = res.body!.getReader();
    const first = await reader.read();
    const firstMs = performance.now() - t0;
    expect(new TextDecoder().decode(first.value)).toContain('event: ping');
    // The node holds the second event for 1.5 s: a buffering proxy would deliver both together.
    expect(firstMs).toBeLessThan(1200);
    let rest = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      rest += new TextDecoder().decode(value);
    }
    expect(rest).toContain('message_stop');
    expect(performance.now() - t0).toBeGreaterThan(1400);
  });

  test('/v1/realtime WebSockets are upgraded through the proxy and spread over the nodes', async () => {
    const open = async () => {
      const ws = new WebSocket(`${url.replace('http', 'ws')}/v1/realtime?model=x`);
      const messages: string[] = [];
      const next = () => new Promise<string>((resolve, reject) => {
        ws.addEventListener('message', (e) => resolve(String(e.data)), { once: true });
        ws.addEventListener('error', () => reject(new Error('websocket error')), { once: true });
      });
      const hello = JSON.parse(await next()) as { node: string };
      ws.send('ping');
      messages.push(await next());
      return { ws, node: hello.node, messages };
    };
    const sessions = [await open(), await open(), await open()];
    expect(sessions.map((s) => s.node).sort()).toEqual(['gateway1', 'gateway2', 'gateway3']);
    for (const s of sessions) {
      expect(s.messages).toEqual(['echo:ping']);
      s.ws.close();
    }
  });
});
