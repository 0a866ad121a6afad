/**
 * `bun run bench/slow-readers.ts [checkout]`: /health latency while 100 clients (BENCH_CLIENTS) open 10 MB
 * streams and stop reading (half of them one oversized event, cut at SSE_MAX_EVENT_BYTES). The gateway
 * (bench/gateway-proc.ts of `checkout`, default this one) fills their sockets meanwhile; a separate process
 * probes /health every 5 ms, so this process's own work (it serves the upstream) cannot delay the probe.
 * Prints p50/p99/max over the first second after the clients connect, and over the next two, and how much
 * of each stream the gateway read. BENCH_NICE (default 10) lowers this process's priority once the gateway
 * and the probes run (attackers and upstreams are other machines in production).
 * BENCH_GW_BUN_ARGS passes flags to the gateway's bun (e.g. `--cpu-prof --cpu-prof-dir=/tmp/p`).
 */
if (!process.env.BUN_CONFIG_MAX_HTTP_REQUESTS) {
  const child = Bun.spawn([process.execPath, ...process.argv.slice(1)], { env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: '8192' }, stdio: ['inherit', 'inherit', 'inherit'] });
  process.exit(await child.exited);
}
import net from 'node:net';
import { resolve } from 'node:path';
import { ownPackages } from './lib/procs';

const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 100);
const STREAM_BYTES = 10 << 20;
const enc = new TextEncoder();
const frame = (type: string, extra: object) => enc.encode(`event: ${type}\ndata: ${JSON.stringify({ type, ...extra })}\n\n`);
const START = frame('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'm', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } });
const DELTA = frame('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'x'.repeat(1000) } });
const HUGE_HEAD = enc.encode('event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"');
const HUGE_BODY = enc.encode('y'.repeat(65_536));
const DELTAS = new Uint8Array(DELTA.byteLength * 64);
for (let i = 0; i < 64; i++) DELTAS.set(DELTA, i * DELTA.byteLength);

// ~10 MB per stream, produced on demand (what the gateway reads is what it could write).
const produced = { small: 0, huge: 0 };
const upstream = Bun.serve({
  port: 0, hostname: '127.0.0.1', idleTimeout: 0,
  async fetch(req) {
    const huge = ((await req.json()) as { metadata?: { user_id?: string } }).metadata?.user_id === 'huge';
    let sent = 0;
    let first = true;
    return new Response(new ReadableStream<Uint8Array>({
      pull(c) {
        if (first) { first = false; return c.enqueue(START); }
        if (sent >= STREAM_BYTES) return c.close();
        const chunk = huge ? (sent === 0 ? HUGE_HEAD : HUGE_BODY) : DELTAS;
        sent += chunk.byteLength;
        produced[huge ? 'huge' : 'small'] += chunk.byteLength;
        c.enqueue(chunk);
      },
    }, { highWaterMark: 0 }), { headers: { 'content-type': 'text/event-stream' } });
  },
});

const checkout = ownPackages(resolve(process.argv[2] ?? `${import.meta.dir}/..`));
const proc = Bun.spawn([process.execPath, ...(process.env.BENCH_GW_BUN_ARGS?.split(/\s+/).filter(Boolean) ?? []), 'bench/gateway-proc.ts', `http://127.0.0.1:${upstream.port}`], {
  cwd: checkout, stdout: 'pipe', stderr: 'inherit',
  env: { ...process.env, BENCH_GW_ENV: JSON.stringify({ STREAM_STALL_TIMEOUT_MS: '60000', RELAY_HEALTH_FAILURES: '1000' }) },
});
const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
let text = '';
while (!text.includes('\n')) text += new TextDecoder().decode((await reader.read()).value);
reader.releaseLock();
const gw = JSON.parse(text.split('\n')[0]!) as { url: string; key: string };
const port = Number(new URL(gw.url).port);

/** CPU seconds (user + system) a process has used so far. */
const cpuSeconds = (pid: number) => {
  const f = require('node:fs').readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
};

const sockets: net.Socket[] = [];
/** A streaming request on a raw socket that reads the first bytes, then stops reading; false if no byte came within 10 s. */
function slowClient(kind: 'small' | 'huge'): Promise<boolean> {
  const payload = JSON.stringify({ model: 'bench-model', max_tokens: 100, stream: true, metadata: { user_id: kind }, messages: [{ role: 'user', content: 'hi' }] });
  return new Promise((done) => {
    const s = net.connect(port, '127.0.0.1', () => {
      s.write(`POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-api-key: ${gw.key}\r\nanthropic-version: 2023-06-01\r\ncontent-length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`);
    });
    sockets.push(s);
    const timer = setTimeout(() => done(false), 10_000);
    s.once('data', () => { s.pause(); clearTimeout(timer); done(true); });
    s.once('error', () => { clearTimeout(timer); done(false); });
  });
}

const SECONDS = 3;
// Two probes: one keep-alive connection (the event loop's latency), and a new connection per request
// (what a load balancer's health check sees: connection setup included).
const probeScript = (fresh: boolean) => `const out = []; const t0 = performance.now();
while (performance.now() - t0 < ${(SECONDS + 0.5) * 1000}) {
  const t = performance.now();
  const r = await fetch(${JSON.stringify(`${gw.url}/health`)}, { keepalive: ${!fresh}, signal: AbortSignal.timeout(15000) }).catch(() => null);
  await r?.text();
  out.push([t - t0, r ? performance.now() - t : 15000]);
  await Bun.sleep(5);
}
console.log(JSON.stringify(out));`;
try {
  for (let i = 0; i < 20; i++) await (await fetch(`${gw.url}/health`)).text();
  const probes = [false, true].map((fresh) => Bun.spawn([process.execPath, '-e', probeScript(fresh)], { stdout: 'pipe', stderr: 'inherit' }));
  await Bun.sleep(500);
  // The attackers and the upstream are other machines in production; here they share the cores. With
  // BENCH_NICE (default 10) this process (upstream double and clients; every thread: Linux nice is per
  // thread) yields the CPU to the gateway and the probes, which keep the default priority.
  const nice = Number(process.env.BENCH_NICE ?? 10);
  if (nice) for (const tid of require('node:fs').readdirSync('/proc/self/task')) require('node:os').setPriority(Number(tid), nice);
  const cpu0 = cpuSeconds(proc.pid);
  const t0 = performance.now();
  const attackAt = 500;
  const answered = (await Promise.all(Array.from({ length: CLIENTS }, (_, i) => slowClient(i % 2 ? 'huge' : 'small')))).filter(Boolean).length;
  const opened = performance.now() - t0;
  const [kept, fresh] = await Promise.all(probes.map(async (p) => JSON.parse(await new Response(p.stdout).text()) as Array<[number, number]>));
  const stats = (samples: Array<[number, number]>, from: number, to: number) => {
    const ms = samples.filter(([t]) => t >= from && t < to).map(([, d]) => d).sort((a, b) => a - b);
    const at = (p: number) => ms[Math.min(ms.length - 1, Math.floor(p * ms.length))]!.toFixed(1);
    return ms.length ? `n ${ms.length}, p50 ${at(0.5)} ms, p99 ${at(0.99)} ms, max ${ms.at(-1)!.toFixed(1)} ms` : 'no samples';
  };
  console.log(`${CLIENTS} slow readers through ${checkout} (${answered} answered within ${opened.toFixed(0)} ms; gateway CPU during the attack ${(cpuSeconds(proc.pid) - cpu0).toFixed(2)} s)`);
  const mb = (n: number) => (n / (CLIENTS / 2) / 2 ** 20).toFixed(2);
  console.log(`  upstream bytes read per stream: small ${mb(produced.small)} MB, huge ${mb(produced.huge)} MB`);
  for (const [name, samples] of [['keep-alive', kept!], ['new connection', fresh!]] as const) {
    console.log(`  /health, ${name}: before ${stats(samples, 0, attackAt)}`);
    console.log(`    first second: ${stats(samples, attackAt, attackAt + 1000)}`);
    console.log(`    next ${SECONDS - 1} s:   ${stats(samples, attackAt + 1000, attackAt + SECONDS * 1000)}`);
  }
} finally {
  for (const s of sockets) s.destroy();
  proc.kill('SIGTERM');
  await proc.exited;
  await upstream.stop(true);
}
