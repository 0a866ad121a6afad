/**
 * `bun run bench/compare.ts <other-checkout>[:NAME=value,...] [<another> ...]`: gateway CPU per request of this checkout
 * against other checkouts (e.g. a worktree of the first release), interleaved on one shared upstream so
 * that load from other processes hits every target alike. Each round runs every phase against every
 * target, in an order that alternates between rounds; the table shows medians over BENCH_ROUNDS (3).
 * CPU per request (user + system of the gateway process / requests) is the robust number on a shared
 * machine; req/s is shown for reference. BENCH_SECONDS (3) per phase, BENCH_CONCURRENCY (16), BENCH_PHASES (all).
 */
if (!process.env.BUN_CONFIG_MAX_HTTP_REQUESTS) {
  const child = Bun.spawn([process.execPath, ...process.argv.slice(1)], { env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: '8192' }, stdio: ['inherit', 'inherit', 'inherit'] });
  process.exit(await child.exited);
}
import { resolve } from 'node:path';
import { cpuSeconds, ownPackages, spawnJson } from './lib/procs';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);
const here = resolve(import.meta.dir, '..');
// A target is a checkout, optionally with settings for its gateway: `<dir>:NAME=value,NAME=value`
// (`.:BILLING_FLUSH_MS=20` measures this checkout with another setting beside itself).
const targets = [here, ...process.argv.slice(2)].map((arg) => {
  const [dir, settings] = arg.split(/:(?=[A-Z_]+=)/);
  const env = Object.fromEntries((settings ?? '').split(',').filter(Boolean).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
  return { dir: ownPackages(resolve(dir!)), env, label: arg === here ? here : arg };
});
const dirs = targets.map((t) => t.label);

async function phase(url: string, key: string, stream: boolean, concurrency: number, seconds: number) {
  const body = JSON.stringify({ model: 'bench-model', max_tokens: 64, stream, messages: [{ role: 'user', content: 'Say hello.' }] });
  const headers = { 'content-type': 'application/json', 'vendor-version': '2023-06-01', 'x-api-key': key };
  let n = 0;
  let errors = 0;
  const end = performance.now() + seconds * 1000;
  const worker = async () => {
    while (performance.now() < end) {
      try {
        const res = await fetch(`${url}/v1/messages`, { method: 'POST', headers, body });
        await res.arrayBuffer();
        if (res.status === 200) n++;
        else errors++;
      } catch {
        errors++;
      }
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  return { n, errors, secs: (performance.now() - t0) / 1000 };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const upstream = await spawnJson(['bench/upstream-proc.ts'], here);
const gateways = await Promise.all(targets.map((t) => spawnJson(['bench/gateway-proc.ts', upstream.info.url], t.dir, Object.keys(t.env).length ? { BENCH_GW_ENV: JSON.stringify({ ...(process.env.BENCH_GW_ENV ? JSON.parse(process.env.BENCH_GW_ENV) : {}), ...t.env }) } : {})));
// BENCH_PHASES: a comma list of phase labels to run (e.g. `json c=16`), for more rounds of the one that matters.
const only = process.env.BENCH_PHASES?.split(',').map((x) => x.trim());
const phases = ([['json c=1', false, 1], [`json c=${CONCURRENCY}`, false, CONCURRENCY], ['sse c=1', true, 1], [`sse c=${CONCURRENCY}`, true, CONCURRENCY]] as const)
  .filter(([label]) => !only || only.includes(label));
const cpu: number[][][] = phases.map(() => dirs.map(() => []));
const rps: number[][][] = phases.map(() => dirs.map(() => []));
try {
  for (const g of gateways) for (const s of [false, true]) await phase(g.info.url, g.info.key, s, 4, 1);
  for (let round = 0; round < ROUNDS; round++) {
    const order = dirs.map((_, i) => i);
    if (round % 2) order.reverse();
    for (const [pi, [, stream, conc]] of phases.entries()) {
      for (const i of order) {
        const g = gateways[i]!;
        const c0 = cpuSeconds(g.proc.pid);
        const r = await phase(g.info.url, g.info.key, stream, conc, conc === 1 ? SECONDS / 2 : SECONDS);
        if (r.errors) console.error(`${dirs[i]}: ${r.errors} errors`);
        cpu[pi]![i]!.push(((cpuSeconds(g.proc.pid) - c0) * 1e6) / Math.max(1, r.n + r.errors));
        rps[pi]![i]!.push(r.n / r.secs);
      }
    }
    console.error(`round ${round + 1}/${ROUNDS} done`);
  }
  console.log(`\nCPU per request (median of ${ROUNDS} interleaved rounds, ${SECONDS} s phases; ${new Date().toISOString()})\n`);
  console.log(`| phase | ${dirs.map((d) => `${d} µs (req/s)`).join(' | ')} |`);
  console.log(`|---|${dirs.map(() => '---').join('|')}|`);
  for (const [pi, [label]] of phases.entries()) {
    console.log(`| ${label} | ${dirs.map((_, i) => `${median(cpu[pi]![i]!).toFixed(0)} (${median(rps[pi]![i]!).toFixed(0)}) [${cpu[pi]![i]!.map((x) => x.toFixed(0)).join(', ')}]`).join(' | ')} |`);
  }
} finally {
  for (const p of [upstream, ...gateways]) p.proc.kill('SIGTERM');
  await Promise.all([upstream, ...gateways].map((p) => p.proc.exited));
}
