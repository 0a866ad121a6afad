/**
 * `bun run bench/password-load.ts`: what callers who know a password cost everyone else on the node.
 * 1. How many argon2id hashes Bun runs at once: the wall time of 1, 2, 4, 8 concurrent verifies.
 * 2. A real gateway process (fresh SQLite); /health is timed one request at a time while BENCH_CALLERS
 *    (default 8) callers log in as root with the right password in a loop, for BENCH_SECONDS (default 5),
 *    once with the password gate opened wide (the old behaviour) and once with the default settings.
 * It reports /health p50/p95/max next to the idle baseline, and the logins answered per status.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startGatewayProcess } from '../tests/helpers/gateway-process';

const CALLERS = Number(process.env.BENCH_CALLERS ?? 8);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROOT_PASSWORD = 'bench-root-password';

const stat = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const f = (q: number) => s[Math.min(s.length - 1, Math.floor(s.length * q))]!.toFixed(1);
  return `n=${s.length} p50=${f(0.5)}ms p95=${f(0.95)}ms max=${s.at(-1)!.toFixed(1)}ms`;
};

async function hashParallelism(): Promise<void> {
  const hash = await Bun.password.hash('x'.repeat(16), { algorithm: 'argon2id' });
  for (const n of [1, 2, 4, 8]) {
    const t0 = performance.now();
    await Promise.all(Array.from({ length: n }, () => Bun.password.verify('x'.repeat(16), hash)));
    console.log(`verify x${n} at once: ${(performance.now() - t0).toFixed(0)} ms wall`);
  }
}

async function probeHealth(url: string, untilMs: number): Promise<number[]> {
  const out: number[] = [];
  while (Date.now() < untilMs) {
    const t0 = performance.now();
    await (await fetch(`${url}/health`)).arrayBuffer();
    out.push(performance.now() - t0);
    await Bun.sleep(20);
  }
  return out;
}

async function phase(label: string, env: Record<string, string>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-bench-pw-'));
  const gw = await startGatewayProcess({ DATABASE_URL: `sqlite:${join(dir, 'gw.db')}`, PORT: '0', HOST: '127.0.0.1', ROOT_PASSWORD, LOGIN_IP_PER_MINUTE: '100000', LOGIN_MAX_FAILURES: '1000', ...env });
  try {
    const idle = await probeHealth(gw.url, Date.now() + 1500);
    const until = Date.now() + SECONDS * 1000;
    const statuses = new Map<number, number>();
    const callers = Array.from({ length: CALLERS }, async () => {
      while (Date.now() < until) {
        const r = await fetch(`${gw.url}/api/user/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'root', password: ROOT_PASSWORD }) });
        await r.arrayBuffer();
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
        if (r.status !== 200) await Bun.sleep(50);
      }
    });
    const busy = await probeHealth(gw.url, until);
    await Promise.all(callers);
    console.log(`${label}\n  /health idle: ${stat(idle)}\n  /health with ${CALLERS} login loops: ${stat(busy)}\n  logins by status: ${JSON.stringify(Object.fromEntries(statuses))}`);
  } finally {
    gw.proc.kill();
    await gw.proc.exited;
    rmSync(dir, { recursive: true, force: true });
  }
}

await hashParallelism();
await phase('gate wide open (as before)', { PASSWORD_HASH_SLOTS: '1024', PASSWORD_HASH_QUEUE: '100000', PASSWORD_CHECKS_PER_MINUTE: '100000' });
await phase('defaults (gate + 30 checks per username per minute)', {});
await phase('defaults, per-username limit lifted (the gate alone)', { PASSWORD_CHECKS_PER_MINUTE: '100000' });
