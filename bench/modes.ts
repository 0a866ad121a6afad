/**
 * `bun run bench/modes.ts`: the storage modes side by side in one run, interleaved like bench/compare.ts so
 * that load from other processes hits every mode alike:
 *   sqlite  one gateway process on SQLite (journal + batched settlement),
 *   pg      one gateway process on PostgreSQL + Redis (group-commit settlement awaited before the answer),
 *   pg-2w   WORKERS=2 on PostgreSQL + Redis (a supervisor and two workers sharing the port),
 *   pg-x    one PostgreSQL + Redis process with BENCH_X_ENV's settings on top (only when named in BENCH_MODES):
 *           a variant measured interleaved with `pg` in one run, since runs minutes apart on a shared machine
 *           differ by more than the effects measured (CPU pressure moves the PostgreSQL − SQLite difference by ~1 ms).
 * Every mode runs the real server entry (apps/server/src/index.ts) with auth, metering and usage logs on,
 * seeded by bench/gateway-proc.ts (channel, price, funded user, key), against one shared upstream double
 * (bench/upstream-proc.ts), which is also measured directly so latency can be given as "added".
 * Each PostgreSQL mode gets a fresh schema and Redis prefix, dropped at the end (also after a failure; a
 * killed run's leftovers are dropped by the next run).
 *
 * Per mode: req/s at BENCH_CONCURRENCY (16) connections, JSON and SSE; added p50/p99 at one connection of
 * the JSON answer and of the first SSE chunk; CPU µs per request of the gateway processes (supervisor and
 * workers) and of the PostgreSQL backends serving them (by application_name); and, for the c=16 phases,
 * how many cores the load generator (this process) and the upstream double used meanwhile.
 *
 * Env: BENCH_SECONDS (3) per phase and mode, BENCH_ROUNDS (3), BENCH_CONCURRENCY (16), BENCH_MODES
 * (sqlite,pg,pg-2w; also pg-x), BENCH_X_ENV (JSON, pg-x's extra settings), BENCH_PHASES (all: json c=1, sse c=1, json c=16, sse c=16), BENCH_PG_URL (GW_TEST_PG or
 * postgres://postgres@127.0.0.1:5432/test), BENCH_REDIS_URL (GW_TEST_REDIS or redis://127.0.0.1:6379),
 * BENCH_GW_ENV (JSON, extra gateway settings for every mode), BENCH_GW_BUN_ARGS (flags for the gateways' bun), BENCH_OUT (a file for the results as JSON),
 * BENCH_USERS (1: funded users, each with a key; connection i sends as user i mod N, so N > 1 spreads the
 * settlements over N user rows instead of queueing them on one), BENCH_THINK_MS (0: the one-client phases
 * pause this long between requests, so the previous request's trailing work is not in the next one's time).
 * JSON at one connection is reported to the complete answer and to its first byte: on PostgreSQL a JSON answer
 * starts before its settlement commits and only its last byte waits for the commit.
 */
if (!process.env.BUN_CONFIG_MAX_HTTP_REQUESTS) {
  const child = Bun.spawn([process.execPath, ...process.argv.slice(1)], { env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: '8192' }, stdio: ['inherit', 'inherit', 'inherit'] });
  process.exit(await child.exited);
}
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import { connectPg } from '@gw/db/pg/connect';
import { load, quantiles, type Samples, type Target } from './lib/latency';
import { spawnJson } from './lib/procs';
import { dropRedisPrefix, freePort } from './lib/housekeeping';
import { cpuBetween, cpuOf, descendants } from './lib/proc-tree';
import { pressureSince } from './lib/pressure';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
/** Pause between requests in the one-client phases (0: back to back). */
const THINK_MS = Number(process.env.BENCH_THINK_MS ?? 0);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);
const USERS = Math.max(1, Number(process.env.BENCH_USERS ?? 1));
const PG_URL = process.env.BENCH_PG_URL ?? process.env.GW_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS_URL = process.env.BENCH_REDIS_URL ?? process.env.GW_TEST_REDIS ?? 'redis://127.0.0.1:6379';
const EXTRA_ENV: Record<string, string> = process.env.BENCH_GW_ENV ? JSON.parse(process.env.BENCH_GW_ENV) : {};
// BENCH_GW_BUN_ARGS: flags for the gateways' bun, e.g. `--cpu-prof --cpu-prof-md --cpu-prof-dir=/tmp/prof`.
const BUN_ARGS = process.env.BENCH_GW_BUN_ARGS?.split(/\s+/).filter(Boolean) ?? [];
const HERE = resolve(import.meta.dir, '..');
const SCHEMA_PREFIX = 'gwbench';

type ModeName = 'sqlite' | 'pg' | 'pg-2w' | 'pg-x';
const ALL_MODES: ModeName[] = ['sqlite', 'pg', 'pg-2w'];
const KNOWN_MODES: ModeName[] = [...ALL_MODES, 'pg-x'];
const MODES = (process.env.BENCH_MODES?.split(',').map((m) => m.trim()) ?? ALL_MODES) as ModeName[];
for (const m of MODES) if (!KNOWN_MODES.includes(m)) throw new Error(`BENCH_MODES: unknown mode ${m} (known: ${KNOWN_MODES.join(', ')})`);
const X_ENV: Record<string, string> = process.env.BENCH_X_ENV ? JSON.parse(process.env.BENCH_X_ENV) : {};

interface Mode {
  name: ModeName;
  workers: number;
  env: Record<string, string>;
  /** PostgreSQL modes: the schema and Redis prefix to drop, and the application_name of its backends. */
  schema?: string;
  prefix?: string;
  appName?: string;
  dir?: string;
  proc?: Bun.Subprocess;
  target?: Target;
}

const f = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '-');
const median = (xs: number[]) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]! : NaN);

// ---- PostgreSQL / Redis housekeeping ----------------------------------------------------------------

const admin = connectPg(PG_URL, { max: 1, onnotice: () => {} });

/** Schemas left by bench runs whose process is gone (killed before its own cleanup). */
async function dropStaleSchemas(): Promise<void> {
  const rows = await admin<{ s: string }[]>`select nspname as s from pg_namespace where nspname like ${SCHEMA_PREFIX + '\\_%'}`;
  for (const { s } of rows) {
    const pid = Number(s.split('_')[1]);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try { process.kill(pid, 0); continue; } catch { /* its run is gone */ }
    await admin`drop schema if exists ${admin(s)} cascade`;
  }
}

/** PIDs of the PostgreSQL backends serving one mode (its pool, change feed and leader connections). */
async function backendPids(appName: string): Promise<number[]> {
  const rows = await admin<{ pid: number }[]>`select pid from pg_stat_activity where application_name = ${appName} or application_name like ${appName + '-%'}`;
  return rows.map((r) => r.pid);
}

// ---- modes ------------------------------------------------------------------------------------------

function makeMode(name: ModeName): Mode {
  const port = String(freePort());
  const base = { HOST: '127.0.0.1', PORT: port, LOG_LEVEL: 'info', ...EXTRA_ENV };
  if (name === 'sqlite') {
    const dir = mkdtempSync(join(tmpdir(), 'gw-bench-modes-'));
    return { name, workers: 1, dir, env: { ...base, DATABASE_URL: `sqlite:${join(dir, 'gateway.db')}` } };
  }
  const tag = name.replace('-', '');
  const schema = `${SCHEMA_PREFIX}_${process.pid}_${tag}`;
  const prefix = `gwbench:${process.pid}:${tag}:`;
  const appName = `gwbench-${process.pid}-${tag}`;
  const workers = name === 'pg-2w' ? 2 : 1;
  return {
    name, workers, schema, prefix, appName,
    env: {
      ...base, DATABASE_URL: PG_URL, REDIS_URL, PG_SCHEMA: schema, REDIS_PREFIX: prefix, SECRET_KEY: randomBytes(32).toString('hex'),
      // postgres.js names its connections after PGAPPNAME, so the bench can find (and charge) its backends.
      PGAPPNAME: appName, WORKERS: String(workers),
      ...(name === 'pg-x' ? X_ENV : {}),
    },
  };
}

/** Seeds the mode's database through bench/gateway-proc.ts (then stops it) and returns the relay key. */
async function seed(m: Mode, upstreamUrl: string): Promise<string[]> {
  // gateway-proc listens on a port of its own; WORKERS is the entry's business, not the seeder's.
  const { WORKERS: _w, PORT: _p, ...env } = m.env;
  const g = await spawnJson(['bench/gateway-proc.ts', upstreamUrl], HERE, { BENCH_GW_ENV: JSON.stringify(env), BENCH_USERS: String(USERS) });
  // Its writes are committed once it printed the key. A SIGTERM that lands before its handler is installed
  // ends it by the signal's default action, which loses nothing; any other ending is a failure.
  g.proc.kill('SIGTERM');
  await g.proc.exited;
  if (g.proc.exitCode !== 0 && g.proc.signalCode !== 'SIGTERM') throw new Error(`${m.name}: the seeding gateway ended with ${g.proc.exitCode ?? g.proc.signalCode}`);
  return g.info.keys as string[];
}

/** Starts the real server entry and waits until every worker says it listens. */
async function start(m: Mode, keys: string[]): Promise<void> {
  // The entry sizes Bun's fetch limit itself, as in production: not this load generator's value.
  const { BUN_CONFIG_MAX_HTTP_REQUESTS: _limit, ...inherited } = process.env;
  const proc = Bun.spawn([process.execPath, ...BUN_ARGS, 'apps/server/src/index.ts'], { cwd: HERE, env: { ...inherited, ...m.env }, stdout: 'pipe', stderr: 'inherit', stdin: 'ignore' });
  m.proc = proc;
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  const dec = new TextDecoder();
  let out = '';
  const deadline = Date.now() + 60_000;
  while ((out.match(/\blistening\b/g)?.length ?? 0) < m.workers) {
    if (Date.now() > deadline) throw new Error(`${m.name}: not listening after 60 s:\n${out}`);
    const { done, value } = await reader.read();
    if (done) throw new Error(`${m.name}: exited before listening:\n${out}`);
    out += dec.decode(value);
  }
  reader.releaseLock();
  // Keep draining: a full pipe would block the gateway's logging.
  void (proc.stdout as ReadableStream<Uint8Array>).pipeTo(new WritableStream());
  m.target = { url: `http://127.0.0.1:${m.env.PORT}`, headers: { 'content-type': 'application/json', 'vendor-version': '2023-06-01', 'x-api-key': keys[0]! }, keys };
}

async function stop(m: Mode): Promise<void> {
  if (m.proc && m.proc.exitCode === null) {
    m.proc.kill('SIGTERM');
    const t = setTimeout(() => m.proc!.kill('SIGKILL'), 15_000);
    await m.proc.exited;
    clearTimeout(t);
  }
  if (m.dir) rmSync(m.dir, { recursive: true, force: true });
  if (m.schema) await admin`drop schema if exists ${admin(m.schema)} cascade`.catch((e) => console.error(`drop ${m.schema}: ${e.message}`));
  if (m.prefix) await dropRedisPrefix(REDIS_URL, m.prefix).catch((e) => console.error(`drop ${m.prefix}: ${e.message}`));
}

// ---- measurement ------------------------------------------------------------------------------------

interface PhaseResult { rps: number; p50: number; p99: number; fb50: number; fb99: number; n: number; errors: number; gwUs: number; pgUs: number; loadCores: number; upstreamCores: number; gwCores: number; pgCores: number; cpuStall: number }

const phases = ([['json c=1', false, 1], ['sse c=1', true, 1], [`json c=${CONCURRENCY}`, false, CONCURRENCY], [`sse c=${CONCURRENCY}`, true, CONCURRENCY]] as const)
  .filter(([label]) => !process.env.BENCH_PHASES || process.env.BENCH_PHASES.split(',').map((x) => x.trim()).includes(label));

// From /proc like the others (all threads: Bun's fetch runs on its own HTTP thread).
const selfCpu = () => cpuOf([process.pid]).get(process.pid) ?? 0;

async function measure(target: Target, gatewayPid: number | null, appName: string | undefined, upstreamPid: number, stream: boolean, conc: number): Promise<PhaseResult> {
  const gwPids = gatewayPid ? descendants(gatewayPid) : [];
  const pgPids = appName ? await backendPids(appName) : [];
  const gw0 = cpuOf(gwPids);
  const pg0 = cpuOf(pgPids);
  const up0 = cpuOf([upstreamPid]);
  const me0 = selfCpu();
  const psi = pressureSince();
  const t0 = performance.now();
  const s: Samples = await load(target, stream, conc, SECONDS, undefined, undefined, conc === 1 ? THINK_MS : 0);
  const secs = (performance.now() - t0) / 1000;
  const stall = psi().cpuSome;
  const me = selfCpu() - me0;
  const up = cpuBetween(up0, cpuOf([upstreamPid]));
  const gw = gatewayPid ? cpuBetween(gw0, cpuOf(descendants(gatewayPid))) : 0;
  const pg = appName ? cpuBetween(pg0, cpuOf(await backendPids(appName))) : 0;
  const q = quantiles(stream ? s.ttft : s.lat);
  const fb = quantiles(s.ttft);
  const reqs = Math.max(1, q.n + s.errors);
  return {
    rps: q.n / secs, p50: q.p50, p99: q.p99, fb50: fb.p50, fb99: fb.p99, n: q.n, errors: s.errors,
    gwUs: (gw * 1e6) / reqs, pgUs: (pg * 1e6) / reqs,
    loadCores: me / secs, upstreamCores: up / secs, gwCores: gw / secs, pgCores: pg / secs, cpuStall: stall,
  };
}

// ---- run --------------------------------------------------------------------------------------------

const modes = MODES.map(makeMode);
const upstream = await spawnJson(['bench/upstream-proc.ts'], HERE);
let interrupted = false;
const cleanup = async () => {
  for (const m of modes) await stop(m).catch((e) => console.error(`stop ${m.name}: ${e.message}`));
  upstream.proc.kill('SIGTERM');
  await upstream.proc.exited;
  await admin.end({ timeout: 1 });
};
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => { if (interrupted) return; interrupted = true; console.error(`\n${sig}: stopping the gateways and dropping their schemas`); void cleanup().finally(() => process.exit(130)); });

try {
  if (modes.some((m) => m.schema)) await dropStaleSchemas();
  for (const m of modes) {
    const t0 = performance.now();
    const keys = await seed(m, upstream.info.url);
    await start(m, keys);
    console.error(`${m.name}: seeded and started in ${f((performance.now() - t0) / 1000, 1)} s (${m.target!.url}${m.schema ? `, schema ${m.schema}, prefix ${m.prefix}` : ''})`);
  }
  const direct: Target = { url: upstream.info.url, headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'x-api-key': 'bench-upstream-key' } };
  // Admission answers 503 while a recovery window runs (a Redis data loss, HOLD_LEASE_MS / 3 + 1 s; a fresh
  // schema's first start, here the seeder's, opens the epoch at once), so every key is first sent until admitted.
  for (const m of modes) {
    for (const key of m.target!.keys ?? []) {
      const deadline = performance.now() + 60_000;
      for (;;) {
        const res = await fetch(`${m.target!.url}/v1/messages`, { method: 'POST', headers: { ...m.target!.headers, 'x-api-key': key }, body: JSON.stringify({ model: 'bench-model', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }) });
        await res.arrayBuffer();
        if (res.status === 200) break;
        if (res.status !== 503 || performance.now() > deadline) throw new Error(`${m.name}: a key is not admitted (HTTP ${res.status})`);
        await Bun.sleep(250);
      }
    }
  }
  // Warm-up: JIT, connection pools, page caches, a worker's first connections.
  for (const m of modes) for (const s of [false, true]) await load(m.target!, s, CONCURRENCY, 1);
  const names = ['direct', ...modes.map((m) => m.name)];
  const results: PhaseResult[][][] = phases.map(() => names.map(() => []));
  for (let round = 0; round < ROUNDS; round++) {
    const order = names.map((_, i) => i);
    if (round % 2) order.reverse();
    for (const [pi, [, stream, conc]] of phases.entries()) {
      for (const i of order) {
        const m = i === 0 ? null : modes[i - 1]!;
        const r = await measure(m ? m.target! : direct, m ? m.proc!.pid : null, m?.appName, upstream.proc.pid, stream, conc);
        if (r.errors) console.error(`${names[i]} ${phases[pi]![0]}: ${r.errors} errors`);
        results[pi]![i]!.push(r);
      }
    }
    console.error(`round ${round + 1}/${ROUNDS} done`);
  }

  const med = (pi: number, i: number, k: keyof PhaseResult) => median(results[pi]![i]!.map((r) => r[k]));
  const load1 = (await Bun.file('/proc/loadavg').text()).split(' ').slice(0, 3).join(' ');
  console.log(`\nStorage modes (medians of ${ROUNDS} interleaved rounds, ${SECONDS} s phases; ${new Date().toISOString()}, ${navigator.hardwareConcurrency} cores, load average ${load1}, Bun ${Bun.version}, ${USERS} user${USERS > 1 ? 's' : ''})`);
  const stalls = results.flat(2).map((r) => r.cpuStall).filter(Number.isFinite);
  // A quiet machine shows a few %; on a shared one every extra process hop (gateway → PostgreSQL → back) waits for a CPU.
  if (stalls.length) console.log(`  CPU pressure during the phases (share of time some task waited for a CPU, /proc/pressure): median ${f(median(stalls) * 100, 0)}%, max ${f(Math.max(...stalls) * 100, 0)}%`);
  console.log('  added = the mode\'s p50/p99 minus the upstream\'s own (direct) in the same round; CPU = gateway processes (supervisor + workers) / PostgreSQL backends, per request\n');
  console.log(`| phase | ${names.join(' | ')} |`);
  console.log(`|---|${names.map(() => '---:').join('|')}|`);
  const summary: Record<string, unknown> = {};
  for (const [pi, [label, , conc]] of phases.entries()) {
    const cells = names.map((_, i) => {
      const rps = med(pi, i, 'rps');
      if (conc === 1) {
        // "Added" per round (each mode against the direct run of the same round), then the median.
        const add = (k: 'p50' | 'p99' | 'fb50') => median(results[pi]![i]!.map((r, round) => r[k] - results[pi]![0]![round]![k]));
        // JSON: also the first byte (on PostgreSQL the answer starts before the commit).
        const fb = label.startsWith('json') ? (i === 0 ? `; first byte p50 ${f(med(pi, 0, 'fb50'))}` : `; first byte +${f(add('fb50'))}`) : '';
        return i === 0 ? `p50 ${f(med(pi, 0, 'p50'))} / p99 ${f(med(pi, 0, 'p99'))} ms${fb}` : `+${f(add('p50'))} / +${f(add('p99'))} ms${fb}, ${f(med(pi, i, 'gwUs'), 0)}${modes[i - 1]!.appName ? ` + pg ${f(med(pi, i, 'pgUs'), 0)}` : ''} µs`;
      }
      return i === 0 ? `${f(rps, 0)} req/s` : `${f(rps, 0)} req/s, ${f(med(pi, i, 'gwUs'), 0)}${modes[i - 1]!.appName ? ` + pg ${f(med(pi, i, 'pgUs'), 0)}` : ''} µs`;
    });
    console.log(`| ${label} | ${cells.join(' | ')} |`);
    summary[label] = Object.fromEntries(names.map((n, i) => [n, results[pi]![i]]));
  }
  // Who used the cores during the c=N phases: the load generator and the double compete with the gateway.
  const busy = phases.map(([label, , conc], pi) => [label, conc, pi] as const).filter(([, conc]) => conc > 1);
  if (busy.length) {
    console.log(`\nCores in use during the c=${CONCURRENCY} phases (median CPU seconds per second): load generator / upstream double / gateway / PostgreSQL backends`);
    for (const [label, , pi] of busy) {
      console.log(`  ${label}: ${names.slice(1).map((n, j) => `${n} ${f(med(pi, j + 1, 'loadCores'))} / ${f(med(pi, j + 1, 'upstreamCores'))} / ${f(med(pi, j + 1, 'gwCores'))} / ${f(med(pi, j + 1, 'pgCores'))}`).join('; ')}`);
    }
  }
  const idx = (n: ModeName) => names.indexOf(n);
  const phaseIdx = (label: string) => phases.findIndex(([l]) => l === label);
  console.log('\nRatios');
  for (const [mode, title] of [['pg', 'PostgreSQL'], ['pg-x', 'PostgreSQL (BENCH_X_ENV)']] as const) {
    for (const label of ['json c=1', 'sse c=1']) {
      const pi = phaseIdx(label);
      if (pi < 0 || idx(mode) < 0 || idx('sqlite') < 0) continue;
      const diff = (k: 'p50' | 'fb50') => median(results[pi]![idx(mode)]!.map((r, round) => r[k] - results[pi]![idx('sqlite')]![round]![k]));
      // The target is "before the first byte": the first SSE chunk, the first bytes of a JSON answer.
      const d = diff('fb50');
      const whole = label.startsWith('json') ? `; to the complete answer ${f(diff('p50'))} ms` : '';
      console.log(`  ${label}: ${title} − SQLite p50 before the first byte ${f(d)} ms (target ≤ 0.30 ms: ${d <= 0.3 ? 'met' : 'not met'})${whole}`);
    }
  }
  for (const label of [`json c=${CONCURRENCY}`, `sse c=${CONCURRENCY}`]) {
    const pi = phaseIdx(label);
    if (pi < 0 || idx('pg') < 0 || idx('pg-2w') < 0) continue;
    const ratio = median(results[pi]![idx('pg-2w')]!.map((r, round) => r.rps / results[pi]![idx('pg')]![round]!.rps));
    const other = med(pi, idx('pg-2w'), 'loadCores') + med(pi, idx('pg-2w'), 'upstreamCores');
    console.log(`  ${label}: 2 workers / 1 worker throughput ${f(ratio)}× (target ≥ 1.7× with 2 free cores; here the load generator and the double used ${f(other)} of ${navigator.hardwareConcurrency} cores)`);
  }
  if (process.env.BENCH_OUT) writeFileSync(process.env.BENCH_OUT, JSON.stringify({ at: new Date().toISOString(), seconds: SECONDS, rounds: ROUNDS, concurrency: CONCURRENCY, users: USERS, results: summary }, null, 2));
} finally {
  if (!interrupted) await cleanup();
}
