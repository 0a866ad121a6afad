/**
 * `bun run bench/streams.ts`: how many concurrent streams one gateway process holds, its RSS per stream,
 * and what happens past its cap (MAX_UPSTREAM_CONNECTIONS): BENCH_STREAMS (default 20000) streams are
 * opened by BENCH_CLIENTS load-generator processes (default one per 4,000 streams); the upstream double
 * holds each open after its first frames.
 * Every child is started through `sh -c 'ulimit -n …'` to raise its descriptor limit as far as the hard
 * limit allows (Bun raises the soft limit to the hard one by itself; only a privileged shell can raise the
 * hard one). A stream holds two descriptors in the gateway (client and upstream socket), so one gateway
 * process holds at most about nofile / 2 streams; the rest are answered 503 overloaded_error at once.
 * BENCH_BODY_BYTES pads each prompt (what a held stream keeps of its request); BENCH_HEAP_SNAPSHOT=<prefix>
 * writes a heap snapshot at idle and when held (compare them with bench/heap-diff.ts); BENCH_BARE_MODE
 * (native, pull, direct) and BENCH_BARE_SMALL=1 vary the bare proxy (see bench/bare-proxy-proc.ts).
 */
import { defaultUpstreamCap, wantedFetchLimit } from '@gw/relay/upstream-slots';

const STREAMS = Number(process.env.BENCH_STREAMS ?? 20_000);
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? Math.max(1, Math.ceil(STREAMS / 4000)));
const WANT_NOFILE = Number(process.env.BENCH_NOFILE ?? 65_536);
const ROOT = `${import.meta.dir}/..`;

/** Runs `args` under a shell that first raises the open-file limit (to WANT_NOFILE, else the hard limit). */
function spawnRaised(args: string[], env: Record<string, string> = {}) {
  const script = `ulimit -n ${WANT_NOFILE} 2>/dev/null || ulimit -n "$(ulimit -Hn)"; exec "$@"`;
  return Bun.spawn(['sh', '-c', script, 'sh', process.execPath, ...args], { cwd: ROOT, env: { ...process.env, ...env }, stdout: 'pipe', stderr: 'inherit' });
}

async function firstLine(proc: ReturnType<typeof spawnRaised>): Promise<any> {
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  let text = '';
  while (!text.includes('\n')) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`child exited before printing: ${text}`);
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return JSON.parse(text.split('\n')[0]!);
}

const status = (pid: number, field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(require('node:fs').readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
const rssMb = (pid: number) => status(pid, 'VmRSS') / 1024;
const openFiles = (pid: number) => Number(/^Max open files\s+(\d+)/m.exec(require('node:fs').readFileSync(`/proc/${pid}/limits`, 'utf8'))?.[1]);
const fds = (pid: number) => require('node:fs').readdirSync(`/proc/${pid}/fd`).length;

const probe = spawnRaised(['-e', 'console.log(JSON.stringify({ nofile: Number(/^Max open files\\s+(\\d+)/m.exec(require("fs").readFileSync("/proc/self/limits","utf8"))[1]) }))']);
const nofile = (await firstLine(probe)).nofile as number;
await probe.exited;
const gwEnv = process.env.BENCH_GW_ENV ? JSON.parse(process.env.BENCH_GW_ENV) : {};
const fetchLimit = wantedFetchLimit(gwEnv, nofile)!;
const upstream = spawnRaised(['bench/upstream-proc.ts'], { BUN_CONFIG_MAX_HTTP_REQUESTS: '256' });
const up = await firstLine(upstream);
// The bench gateway is built in-process by gateway-proc.ts (not the server entry), so it gets the fetch limit here.
// BENCH_GW_FLAGS: extra Bun flags for the gateway (e.g. --smol).
const gwFlags = (process.env.BENCH_GW_FLAGS ?? '').split(' ').filter(Boolean);
// BENCH_TARGET=bare: the thinnest Bun proxy instead of the gateway, for the floor of what a stream costs in Bun.
const bare = process.env.BENCH_TARGET === 'bare';
const gateway = spawnRaised([...gwFlags, '--preload', './bench/gc-on-signal.ts', bare ? 'bench/bare-proxy-proc.ts' : 'bench/gateway-proc.ts', up.url], { BUN_CONFIG_MAX_HTTP_REQUESTS: String(fetchLimit) });
const gw = bare ? { ...(await firstLine(gateway)), key: 'bench-upstream-key' } : await firstLine(gateway);
const clients: Array<ReturnType<typeof spawnRaised>> = [];
try {
  // Idle: after start-up garbage is collected, the same way the held figure below is read.
  gateway.kill('SIGUSR2');
  await Bun.sleep(1500);
  const idleRss = rssMb(gateway.pid);
  const per = Math.ceil(STREAMS / CLIENTS);
  let peak = 0;
  const sampler = setInterval(() => { peak = Math.max(peak, rssMb(gateway.pid)); }, 100);
  const t0 = performance.now();
  for (let i = 0; i < CLIENTS; i++) {
    const n = Math.min(per, STREAMS - i * per);
    clients.push(spawnRaised(['bench/stream-client-proc.ts', gw.url, gw.key, String(n)], { BUN_CONFIG_MAX_HTTP_REQUESTS: String(Math.min(65_535, n + 64)) }));
  }
  const reports = await Promise.all(clients.map(firstLine));
  const openSecs = (performance.now() - t0) / 1000;
  await Bun.sleep(500);
  const heldRss = rssMb(gateway.pid);
  // The same after a full collection: what the streams really keep, without garbage not yet collected.
  gateway.kill('SIGUSR2');
  await Bun.sleep(1500);
  const gcRss = rssMb(gateway.pid);
  const heldFds = fds(gateway.pid);
  clearInterval(sampler);
  const opened = reports.reduce((a, r) => a + r.opened, 0);
  const refused = reports.reduce((a, r) => a + r.refused, 0);
  const other: Record<string, number> = {};
  for (const r of reports) for (const [k, v] of Object.entries(r.other as Record<string, number>)) other[k] = (other[k] ?? 0) + v;
  const refusedP99 = Math.max(...reports.map((r) => r.refusedP99 ?? 0));
  const refusedP50 = Math.max(...reports.map((r) => r.refusedP50 ?? 0));
  const perStreamKb = opened ? ((heldRss - idleRss) * 1024) / opened : NaN;
  const perStreamGcKb = opened ? ((gcRss - idleRss) * 1024) / opened : NaN;
  const cap = Number(gwEnv.MAX_UPSTREAM_CONNECTIONS ?? defaultUpstreamCap(openFiles(gateway.pid)));
  console.log(`\nHeld streams (${new Date().toISOString()}, ${navigator.hardwareConcurrency} cores, Bun ${Bun.version}; ${CLIENTS} client processes, gateway, upstream on one machine)\n`);
  console.log(`  open-file limit of each process: ${openFiles(gateway.pid)} (asked for ${WANT_NOFILE}); gateway cap MAX_UPSTREAM_CONNECTIONS = ${cap}, BUN_CONFIG_MAX_HTTP_REQUESTS = ${fetchLimit}`);
  console.log(`  ${STREAMS} streams asked: ${opened} held open, ${refused} answered 503 overloaded_error (p50 ${refusedP50.toFixed(0)} ms, p99 ${refusedP99.toFixed(0)} ms, client queueing included), other outcomes ${JSON.stringify(other)}; all settled in ${openSecs.toFixed(1)} s`);
  console.log(`  gateway RSS: ${idleRss.toFixed(0)} MB idle, ${heldRss.toFixed(0)} MB holding ${opened} streams (peak ${Math.max(peak, heldRss).toFixed(0)} MB): ${perStreamKb.toFixed(1)} kB per stream; ${heldFds} descriptors open`);
  console.log(`  after a full GC: ${gcRss.toFixed(0)} MB, ${perStreamGcKb.toFixed(1)} kB per stream`);
  console.log(`  at these rates ${STREAMS} streams would take ${(idleRss + (perStreamKb * STREAMS) / 1024).toFixed(0)} MB (${(idleRss + (perStreamGcKb * STREAMS) / 1024).toFixed(0)} MB after GC)`);
} finally {
  for (const c of clients) c.kill('SIGTERM');
  gateway.kill('SIGTERM');
  upstream.kill('SIGTERM');
  await Promise.all([...clients.map((c) => c.exited), gateway.exited, upstream.exited]);
}
