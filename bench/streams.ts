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
 * BENCH_WORKERS=N (N > 1): the real server entry with WORKERS=N on PostgreSQL + Redis (BENCH_PG_URL,
 * BENCH_REDIS_URL; a throwaway schema and key prefix) instead of one in-process gateway, so the streams
 * spread over N processes, each with its own descriptor table; BENCH_UPSTREAMS (default 3 then) upstream
 * processes behind as many equal channels, for the same reason. RSS is then the sum over the workers,
 * read without a forced GC (the workers have no GC signal).
 */
import { randomBytes } from 'node:crypto';
import { connectPg } from '@gw/db/pg/connect';
import { defaultUpstreamCap, wantedFetchLimit } from '@gw/relay/upstream-slots';
import { descendants } from './lib/proc-tree';
import { dropRedisPrefix, freePort } from './lib/housekeeping';

const STREAMS = Number(process.env.BENCH_STREAMS ?? 20_000);
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? Math.max(1, Math.ceil(STREAMS / 4000)));
const WANT_NOFILE = Number(process.env.BENCH_NOFILE ?? 65_536);
const WORKERS = Number(process.env.BENCH_WORKERS ?? 1);
const UPSTREAMS = Number(process.env.BENCH_UPSTREAMS ?? (WORKERS > 1 ? 3 : 1));
const PG_URL = process.env.BENCH_PG_URL ?? process.env.GW_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS_URL = process.env.BENCH_REDIS_URL ?? process.env.GW_TEST_REDIS ?? 'redis://127.0.0.1:6379';
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
const upstreams = Array.from({ length: UPSTREAMS }, () => spawnRaised(['bench/upstream-proc.ts'], { BUN_CONFIG_MAX_HTTP_REQUESTS: '256' }));
const upUrls = (await Promise.all(upstreams.map(firstLine))).map((u) => u.url as string).join(',');
// BENCH_GW_FLAGS: extra Bun flags for the gateway (e.g. --smol).
const gwFlags = (process.env.BENCH_GW_FLAGS ?? '').split(' ').filter(Boolean);
// BENCH_TARGET=bare: the thinnest Bun proxy instead of the gateway, for the floor of what a stream costs in Bun.
const bare = process.env.BENCH_TARGET === 'bare';
const pooled = WORKERS > 1 ? await startWorkers() : null;
// The bench gateway is built in-process by gateway-proc.ts (not the server entry), so it gets the fetch limit here.
const gateway = pooled?.proc ?? spawnRaised([...gwFlags, '--preload', './bench/gc-on-signal.ts', bare ? 'bench/bare-proxy-proc.ts' : 'bench/gateway-proc.ts', upUrls], { BUN_CONFIG_MAX_HTTP_REQUESTS: String(fetchLimit) });
const gw = pooled?.gw ?? (bare ? { ...(await firstLine(gateway)), key: 'bench-upstream-key' } : await firstLine(gateway));
/** The gateway's processes: the one spawned, or the supervisor and its workers. */
const gwPids = () => (pooled ? descendants(gateway.pid) : [gateway.pid]);
const gwRss = () => gwPids().reduce((a, pid) => a + (rssMb(pid) || 0), 0);
// Only processes started with bench/gc-on-signal.ts can be asked for a full collection (SIGUSR2 ends any other).
const collect = async () => { if (!pooled) { gateway.kill('SIGUSR2'); await Bun.sleep(1500); } };
const clients: Array<ReturnType<typeof spawnRaised>> = [];
try {
  // Idle: after start-up garbage is collected, the same way the held figure below is read.
  await collect();
  const idleRss = gwRss();
  const per = Math.ceil(STREAMS / CLIENTS);
  let peak = 0;
  const peaks = new Map<number, number>();
  const sampler = setInterval(() => {
    let sum = 0;
    for (const pid of gwPids()) {
      const r = rssMb(pid) || 0;
      sum += r;
      peaks.set(pid, Math.max(peaks.get(pid) ?? 0, r));
    }
    peak = Math.max(peak, sum);
  }, 250);
  const t0 = performance.now();
  for (let i = 0; i < CLIENTS; i++) {
    const n = Math.min(per, STREAMS - i * per);
    clients.push(spawnRaised(['bench/stream-client-proc.ts', gw.url, gw.key, String(n)], { BUN_CONFIG_MAX_HTTP_REQUESTS: String(Math.min(65_535, n + 64)) }));
  }
  const reports = await Promise.all(clients.map(firstLine));
  const openSecs = (performance.now() - t0) / 1000;
  await Bun.sleep(500);
  const heldRss = gwRss();
  const perWorker = pooled ? gwPids().slice(1).map((pid) => ({ pid, rss: rssMb(pid), fds: fds(pid) })) : [];
  // The same after a full collection: what the streams really keep, without garbage not yet collected.
  await collect();
  const gcRss = gwRss();
  const heldFds = gwPids().reduce((a, pid) => a + fds(pid), 0);
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
  const shape = pooled ? `gateway of ${WORKERS} worker processes (PostgreSQL + Redis), ${UPSTREAMS} upstream processes` : `gateway, ${UPSTREAMS} upstream process${UPSTREAMS > 1 ? 'es' : ''}`;
  console.log(`\nHeld streams (${new Date().toISOString()}, ${navigator.hardwareConcurrency} cores, Bun ${Bun.version}; ${CLIENTS} client processes, ${shape}, on one machine)\n`);
  console.log(`  open-file limit of each process: ${openFiles(gateway.pid)} (asked for ${WANT_NOFILE}); cap per gateway process MAX_UPSTREAM_CONNECTIONS = ${cap}${pooled ? '' : `, BUN_CONFIG_MAX_HTTP_REQUESTS = ${fetchLimit}`}`);
  console.log(`  ${STREAMS} streams asked: ${opened} held open, ${refused} answered 503 overloaded_error (p50 ${refusedP50.toFixed(0)} ms, p99 ${refusedP99.toFixed(0)} ms, client queueing included), other outcomes ${JSON.stringify(other)}; all settled in ${openSecs.toFixed(1)} s`);
  console.log(`  gateway RSS: ${idleRss.toFixed(0)} MB idle, ${heldRss.toFixed(0)} MB holding ${opened} streams (peak ${Math.max(peak, heldRss).toFixed(0)} MB): ${perStreamKb.toFixed(1)} kB per stream; ${heldFds} descriptors open`);
  if (pooled) for (const w of perWorker) console.log(`  worker ${w.pid}: ${w.rss.toFixed(0)} MB RSS (peak ${(peaks.get(w.pid) ?? 0).toFixed(0)} MB), ${w.fds} descriptors (about ${Math.round(w.fds / 2)} streams)`);
  if (pooled) console.log(`  supervisor: ${rssMb(gateway.pid).toFixed(0)} MB RSS (peak ${(peaks.get(gateway.pid) ?? 0).toFixed(0)} MB)`);
  else console.log(`  after a full GC: ${gcRss.toFixed(0)} MB, ${perStreamGcKb.toFixed(1)} kB per stream`);
  if (!pooled) console.log(`  at these rates ${STREAMS} streams would take ${(idleRss + (perStreamKb * STREAMS) / 1024).toFixed(0)} MB (${(idleRss + (perStreamGcKb * STREAMS) / 1024).toFixed(0)} MB after GC)`);
} finally {
  for (const c of clients) c.kill('SIGTERM');
  gateway.kill('SIGTERM');
  await Promise.all([...clients.map((c) => c.exited), gateway.exited]);
  // The upstreams last: cut under a live gateway, every held stream would count against its channel.
  for (const u of upstreams) u.kill('SIGTERM');
  await Promise.all(upstreams.map((u) => u.exited));
  await pooled?.drop();
}

/**
 * WORKERS processes of the real server entry on a throwaway PostgreSQL schema and Redis prefix: seeded by
 * gateway-proc.ts (channels, price, user, key), which then stops; the entry starts, and is ready once every
 * worker printed its "listening" line.
 */
async function startWorkers() {
  const tag = `gwbench_streams_${process.pid}`;
  const port = freePort();
  const env: Record<string, string> = {
    HOST: '127.0.0.1', LOG_LEVEL: 'warn', DATABASE_URL: PG_URL, REDIS_URL, PG_SCHEMA: tag, REDIS_PREFIX: `${tag}:`,
    SECRET_KEY: randomBytes(32).toString('hex'), ...gwEnv,
  };
  const drop = async () => {
    const sql = connectPg(PG_URL, { max: 1, onnotice: () => {} });
    await sql`drop schema if exists ${sql(tag)} cascade`.catch((e) => console.error(`drop ${tag}: ${e.message}`));
    await sql.end();
    await dropRedisPrefix(REDIS_URL, `${tag}:`).catch((e) => console.error(`drop ${tag}: ${e.message}`));
  };
  const seeder = spawnRaised(['bench/gateway-proc.ts', upUrls], { BENCH_GW_ENV: JSON.stringify(env) });
  const { key } = await firstLine(seeder);
  seeder.kill('SIGTERM');
  await seeder.exited;
  // The entry sizes Bun's fetch limit itself, as in production.
  const { BUN_CONFIG_MAX_HTTP_REQUESTS: _limit, ...inherited } = process.env;
  const script = `ulimit -n ${WANT_NOFILE} 2>/dev/null || ulimit -n "$(ulimit -Hn)"; exec "$@"`;
  const proc = Bun.spawn(['sh', '-c', script, 'sh', process.execPath, ...gwFlags, 'apps/server/src/index.ts'], {
    cwd: ROOT, env: { ...inherited, ...env, LOG_LEVEL: 'info', WORKERS: String(WORKERS), PORT: String(port) }, stdout: 'pipe', stderr: 'inherit',
  });
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  let out = '';
  while ((out.match(/\blistening\b/g)?.length ?? 0) < WORKERS) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`the gateway exited before listening:\n${out}`);
    out += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  // Keep draining: a full pipe would block the gateway's logging.
  void (proc.stdout as ReadableStream<Uint8Array>).pipeTo(new WritableStream());
  // Admission answers 503 while a recovery window runs (a Redis data loss; a fresh schema's first start opens
  // the epoch at once), so a request is sent until it is admitted, on every worker (each connection may land on any).
  const url = `http://127.0.0.1:${port}`;
  const deadline = performance.now() + 60_000;
  for (let admitted = 0; admitted < WORKERS * 4;) {
    const res = await fetch(`${url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'x-api-key': key, connection: 'close' }, body: JSON.stringify({ model: 'bench-model', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }) });
    await res.arrayBuffer();
    if (res.status === 200) admitted++;
    else if (res.status !== 503 || performance.now() > deadline) throw new Error(`a key is not admitted (HTTP ${res.status})`);
    else await Bun.sleep(250);
  }
  return { proc: proc as unknown as ReturnType<typeof spawnRaised>, gw: { url: `http://127.0.0.1:${port}`, key: key as string }, drop };
}
