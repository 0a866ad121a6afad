/**
 * `bun run bench`: direct-to-upstream vs a bare proxy (the floor) vs through the gateway, on this machine only (127.0.0.1).
 * The upstream double and the gateway run as subprocesses; this process is the load generator.
 * Phases are bounded by time (BENCH_SECONDS, default 5) and a request cap; the last phase holds
 * BENCH_STREAMS (default 1000) concurrent streams open through the gateway and reads its RSS.
 * Numbers on a shared 2-core machine are rough: the generator, the gateway and the upstream share it.
 */
// Bun's fetch runs at most BUN_CONFIG_MAX_HTTP_REQUESTS (default 256) requests at once, per process: the
// gateway (upstream side) and this generator need more to hold 1,000 streams. It is read at start-up, so
// re-run ourselves with it set; the subprocesses inherit it.
if (!process.env.BUN_CONFIG_MAX_HTTP_REQUESTS) {
  const child = Bun.spawn([process.execPath, ...process.argv.slice(1)], { env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: '8192' }, stdio: ['inherit', 'inherit', 'inherit'] });
  process.exit(await child.exited);
}

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const STREAMS = Number(process.env.BENCH_STREAMS ?? 1000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);
const MAX_REQUESTS = 200_000;

async function spawnJson(args: string[]): Promise<{ proc: ReturnType<typeof Bun.spawn>; info: any }> {
  const proc = Bun.spawn([process.execPath, ...args], { cwd: `${import.meta.dir}/..`, stdout: 'pipe', stderr: 'inherit' });
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  let text = '';
  while (!text.includes('\n')) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`${args.join(' ')} exited before printing its address`);
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return { proc, info: JSON.parse(text.split('\n')[0]!) };
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(require('node:fs').readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

const pct = (sorted: number[], p: number) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]! : NaN);

interface Target { url: string; headers: Record<string, string> }
interface PhaseResult { name: string; rps: number; p50: number; p99: number; ttft50: number; ttft99: number; n: number; errors: number }

async function phase(name: string, t: Target, stream: boolean, concurrency: number, seconds: number): Promise<PhaseResult> {
  const body = JSON.stringify({ model: 'bench-model', max_tokens: 64, stream, messages: [{ role: 'user', content: 'Say hello.' }] });
  const lat: number[] = [];
  const ttft: number[] = [];
  let errors = 0;
  let started = 0;
  const end = performance.now() + seconds * 1000;
  const worker = async () => {
    while (performance.now() < end && started < MAX_REQUESTS) {
      started++;
      const t0 = performance.now();
      try {
        const res = await fetch(`${t.url}/v1/messages`, { method: 'POST', headers: t.headers, body });
        if (stream) {
          const reader = res.body!.getReader();
          let first = true;
          for (;;) {
            const { done } = await reader.read();
            if (first) { ttft.push(performance.now() - t0); first = false; }
            if (done) break;
          }
        } else await res.arrayBuffer();
        if (res.status !== 200) errors++;
        else lat.push(performance.now() - t0);
      } catch {
        errors++;
      }
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  const secs = (performance.now() - t0) / 1000;
  lat.sort((a, b) => a - b);
  ttft.sort((a, b) => a - b);
  return { name, rps: lat.length / secs, p50: pct(lat, 50), p99: pct(lat, 99), ttft50: pct(ttft, 50), ttft99: pct(ttft, 99), n: lat.length, errors };
}

/** Opens `n` streams through the gateway that the upstream keeps open; returns when all got their first bytes. */
async function holdStreams(t: Target, n: number): Promise<{ opened: number; abort: () => void }> {
  const ctrl = new AbortController();
  const body = JSON.stringify({ model: 'bench-model', max_tokens: 16, stream: true, metadata: { user_id: 'hold' }, messages: [{ role: 'user', content: 'hold' }] });
  let opened = 0;
  const failed: number[] = [];
  const one = async () => {
    try {
      const res = await fetch(`${t.url}/v1/messages`, { method: 'POST', headers: t.headers, body, signal: ctrl.signal });
      const reader = res.body!.getReader();
      const first = await reader.read();
      if (res.status === 200 && !first.done && new TextDecoder().decode(first.value).includes('message_start')) opened++;
      else failed.push(res.status);
      reader.read().catch(() => {});
    } catch { /* aborted */ }
  };
  // Open in waves so the listen backlog is not the thing being measured.
  for (let i = 0; i < n; i += 100) await Promise.all(Array.from({ length: Math.min(100, n - i) }, one));
  if (failed.length) console.error(`hold: ${failed.length} streams failed to open (statuses ${[...new Set(failed)].join(', ')})`);
  return { opened, abort: () => ctrl.abort() };
}

const f = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '-');

const upstream = await spawnJson(['bench/upstream-proc.ts']);
const gateway = await spawnJson(['bench/gateway-proc.ts', upstream.info.url]);
const bare = await spawnJson(['bench/bare-proxy-proc.ts', upstream.info.url]);
/** CPU seconds (user + system) a process has used so far. */
const cpuSeconds = (pid: number) => {
  const f = require('node:fs').readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
};
try {
  const direct: Target = { url: upstream.info.url, headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'x-api-key': 'bench-upstream-key' } };
  const viaBare: Target = { url: bare.info.url, headers: direct.headers };
  const viaGw: Target = { url: gateway.info.url, headers: { 'content-type': 'application/json', 'vendor-version': '2023-06-01', 'x-api-key': gateway.info.key } };
  // Warm-up (JIT, connection pools, SQLite page cache).
  await phase('warm', direct, false, 4, 0.5);
  await phase('warm', viaGw, false, 4, 0.5);
  await phase('warm', viaGw, true, 4, 0.5);
  await phase('warm', viaBare, false, 4, 0.5);
  const startRss = rssMb(gateway.proc.pid);
  const rows: Array<[string, PhaseResult, PhaseResult, PhaseResult, number, number]> = [];
  for (const [label, stream, conc, secs] of [
    ['json   c=1', false, 1, SECONDS / 2], ['json   c=' + CONCURRENCY, false, CONCURRENCY, SECONDS],
    ['stream c=1', true, 1, SECONDS / 2], ['stream c=' + CONCURRENCY, true, CONCURRENCY, SECONDS],
  ] as const) {
    const d = await phase(`direct ${label}`, direct, stream, conc, secs);
    let c0 = cpuSeconds(bare.proc.pid);
    const b = await phase(`bare ${label}`, viaBare, stream, conc, secs);
    const bareCpu = ((cpuSeconds(bare.proc.pid) - c0) * 1e6) / Math.max(1, b.n + b.errors);
    c0 = cpuSeconds(gateway.proc.pid);
    const g = await phase(`gateway ${label}`, viaGw, stream, conc, secs);
    const gwCpu = ((cpuSeconds(gateway.proc.pid) - c0) * 1e6) / Math.max(1, g.n + g.errors);
    rows.push([label, d, b, g, bareCpu, gwCpu]);
  }
  const idleRss = rssMb(gateway.proc.pid);
  let peakRss = 0;
  const sampler = setInterval(() => { peakRss = Math.max(peakRss, rssMb(gateway.proc.pid)); }, 50);
  const t0 = performance.now();
  const held = await holdStreams(viaGw, STREAMS);
  const openSecs = (performance.now() - t0) / 1000;
  await Bun.sleep(300);
  const heldRss = rssMb(gateway.proc.pid);
  clearInterval(sampler);
  held.abort();

  console.log(`\nGateway benchmark (${new Date().toISOString()}, ${navigator.hardwareConcurrency} cores, Bun ${Bun.version}; load generator, gateway and upstream share the machine)\n`);
  console.log('phase          | path    |   req/s |  p50 ms |  p99 ms | ttft p50 | ttft p99 |      n | errors');
  console.log('---------------|---------|---------|---------|---------|----------|----------|--------|-------');
  for (const [label, d, b, g] of rows) {
    for (const [path, r] of [['direct', d], ['bare', b], ['gateway', g]] as const) {
      console.log(`${label.padEnd(14)} | ${path.padEnd(7)} | ${f(r.rps, 0).padStart(7)} | ${f(r.p50).padStart(7)} | ${f(r.p99).padStart(7)} | ${f(r.ttft50).padStart(8)} | ${f(r.ttft99).padStart(8)} | ${String(r.n).padStart(6)} | ${r.errors}`);
    }
  }
  console.log('\nratios (gateway vs direct; "bare" = the thinnest Bun proxy, the ceiling for any proxy here)');
  for (const [label, d, b, g, bareCpu, gwCpu] of rows) {
    const ttft = label.startsWith('stream') ? `, added TTFT p50 ${f(g.ttft50 - d.ttft50)} ms / p99 ${f(g.ttft99 - d.ttft99)} ms` : '';
    console.log(`  ${label.padEnd(14)} throughput ${f(g.rps / d.rps)}x (bare proxy ${f(b.rps / d.rps)}x), added latency p50 ${f(g.p50 - d.p50)} ms / p99 ${f(g.p99 - d.p99)} ms${ttft}`);
    console.log(`  ${''.padEnd(14)} CPU per request: gateway ${f(gwCpu, 0)} us, bare proxy ${f(bareCpu, 0)} us`);
  }
  console.log(`\n  ${held.opened}/${STREAMS} concurrent streams held open through the gateway (opened in ${f(openSecs, 1)} s)`);
  console.log(`  gateway RSS: ${f(startRss, 0)} MB after warm-up, ${f(idleRss, 0)} MB after the load phases, ${f(heldRss, 0)} MB holding the streams (peak ${f(Math.max(peakRss, heldRss), 0)} MB)`);
} finally {
  gateway.proc.kill('SIGTERM');
  upstream.proc.kill('SIGTERM');
  bare.proc.kill('SIGTERM');
  await Promise.all([gateway.proc.exited, upstream.proc.exited, bare.proc.exited]);
}
