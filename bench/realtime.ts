/**
 * `bun bench/realtime.ts`: WebSocket relay latency and throughput, direct to the realtime upstream
 * double vs through the gateway (real services: auth, routing, metering on), 127.0.0.1 only.
 * The double and the gateway run as subprocesses (this file in another role); this process is the
 * client. Each phase is bounded by time (BENCH_SECONDS, default 5) and a message cap.
 *   latency:    one message in flight, round trip (client → [gateway →] double echo → client)
 *   throughput: BENCH_WINDOW (default 256) messages in flight on one session, echoes per second
 * The payload is an `input_audio_buffer.append` event with 20 ms of 24 kHz PCM16 (1280 base64 chars).
 * Numbers on a shared 2-core machine are rough: client, gateway and upstream share the cores.
 */
import { silentLogger } from '@gw/core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const WINDOW = Number(process.env.BENCH_WINDOW ?? 256);
const MAX_MESSAGES = 2_000_000;
const MODEL = 'gpt-realtime';
const role = process.argv[2];

async function spawnRole(args: string[]): Promise<{ proc: ReturnType<typeof Bun.spawn>; info: any }> {
  const proc = Bun.spawn(['bun', import.meta.path, ...args], { cwd: `${import.meta.dir}/..`, stdout: 'pipe', stderr: 'inherit' });
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  let text = '';
  while (!text.includes('\n')) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`bench role ${args[0]} exited before printing its address`);
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return { proc, info: JSON.parse(text.split('\n')[0]!) };
}

/** Opens a session and waits for session.created; frames after that go to `onFrame`. */
async function session(url: string, headers: Record<string, string>): Promise<{ ws: WebSocket; onFrame: (fn: () => void) => void }> {
  const ws = new WebSocket(url, { headers } as any);
  let handler: () => void = () => {};
  await new Promise<void>((resolve, reject) => {
    ws.onmessage = () => { ws.onmessage = () => handler(); resolve(); };
    ws.onerror = () => reject(new Error(`cannot connect to ${url}`));
  });
  return { ws, onFrame: (fn) => { handler = fn; } };
}

const PAYLOAD = JSON.stringify({ type: 'input_audio_buffer.append', event_id: 'evt_bench', audio: Buffer.alloc(960, 7).toString('base64') });
const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

async function latency(url: string, headers: Record<string, string>) {
  const { ws, onFrame } = await session(url, headers);
  const samples: number[] = [];
  const end = performance.now() + SECONDS * 1000;
  await new Promise<void>((resolve) => {
    let t0 = 0;
    const next = () => {
      if (performance.now() > end || samples.length >= MAX_MESSAGES) return resolve();
      t0 = performance.now();
      ws.send(PAYLOAD);
    };
    onFrame(() => { samples.push(performance.now() - t0); next(); });
    next();
  });
  ws.close();
  samples.sort((a, b) => a - b);
  return { n: samples.length, p50: pct(samples, 50), p99: pct(samples, 99) };
}

async function throughput(url: string, headers: Record<string, string>) {
  const { ws, onFrame } = await session(url, headers);
  let sent = 0;
  let received = 0;
  const start = performance.now();
  const end = start + SECONDS * 1000;
  await new Promise<void>((resolve) => {
    const pump = () => { while (sent - received < WINDOW && sent < MAX_MESSAGES && performance.now() < end) { ws.send(PAYLOAD); sent++; } };
    onFrame(() => {
      received++;
      if (received === sent && (performance.now() >= end || sent >= MAX_MESSAGES)) return resolve();
      pump();
    });
    pump();
  });
  const secs = (performance.now() - start) / 1000;
  ws.close();
  return { n: received, perSecond: received / secs, mbPerSecond: (received * PAYLOAD.length * 2) / secs / 1e6 };
}

async function main() {
  const upstream = await spawnRole(['--upstream']);
  const gateway = await spawnRole(['--gateway', upstream.info.url]);
  try {
    const direct = { url: `${upstream.info.url.replace('http', 'ws')}/v1/realtime?model=${MODEL}`, headers: { authorization: 'Bearer bench-upstream-key' } };
    const via = { url: `${gateway.info.url.replace('http', 'ws')}/v1/realtime?model=${MODEL}`, headers: { authorization: `Bearer ${gateway.info.key}` } };
    const f = (x: number, d = 3) => x.toFixed(d);
    console.log(`realtime relay bench: ${SECONDS}s per phase, payload ${PAYLOAD.length} B, window ${WINDOW}`);
    const ld = await latency(direct.url, direct.headers);
    const lg = await latency(via.url, via.headers);
    console.log(`latency direct : p50 ${f(ld.p50)} ms  p99 ${f(ld.p99)} ms  (${ld.n} round trips)`);
    console.log(`latency gateway: p50 ${f(lg.p50)} ms  p99 ${f(lg.p99)} ms  (${lg.n} round trips)`);
    console.log(`latency ratio  : p50 x${f(lg.p50 / ld.p50, 2)}  p99 x${f(lg.p99 / ld.p99, 2)}  (added p50 ${f(lg.p50 - ld.p50)} ms)`);
    const td = await throughput(direct.url, direct.headers);
    const tg = await throughput(via.url, via.headers);
    console.log(`throughput direct : ${f(td.perSecond, 0)} msg/s echoed (${f(td.mbPerSecond, 1)} MB/s both ways, ${td.n} messages)`);
    console.log(`throughput gateway: ${f(tg.perSecond, 0)} msg/s echoed (${f(tg.mbPerSecond, 1)} MB/s both ways, ${tg.n} messages)`);
    console.log(`throughput ratio  : x${f(tg.perSecond / td.perSecond, 2)} of direct`);
  } finally {
    gateway.proc.kill('SIGTERM');
    upstream.proc.kill('SIGTERM');
    await Promise.all([gateway.proc.exited, upstream.proc.exited]);
  }
}

async function upstreamRole() {
  const { startRealtimeUpstream } = await import('../tests/doubles/realtime-upstream');
  const up = startRealtimeUpstream();
  console.log(JSON.stringify({ url: up.url }));
  process.on('SIGTERM', async () => { await up.stop(); process.exit(0); });
}

async function gatewayRole() {
  const { loadConfig } = await import('@gw/config');
  const { createServices } = await import('../apps/server/src/services');
  const { listen } = await import('../apps/server/src/app');
  const dir = mkdtempSync(join(tmpdir(), 'gw-bench-rt-'));
  // REALTIME_* settings of the bench's own environment reach the gateway (bench/realtime-flood.ts compares them).
  const realtimeEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith('REALTIME_')));
  const config = loadConfig({ ...realtimeEnv, DATABASE_URL: `sqlite:${join(dir, 'gateway.db')}`, ROOT_PASSWORD: 'bench-root-password', HOST: '127.0.0.1' });
  const s = await createServices(config, silentLogger);
  await s.channels.create({ name: 'bench-rt', type: 'openai', base_url: process.argv[3]!, key: 'bench-upstream-key', models: [MODEL] } as any);
  await s.relay.prices.upsert({ model: MODEL, input: 4_000_000, output: 16_000_000, cache_read: 400_000, cache_write: 0, audio_input: 32_000_000, audio_output: 64_000_000 });
  const now = Math.floor(Date.now() / 1000);
  const user = await s.users.insert({ username: 'bench', passwordHash: 'x', createdAt: now, updatedAt: now });
  await s.ledger.apply({ userId: user.id, kind: 'topup', amount: 1e15, ref: 'bench-seed', at: now });
  const { key } = await s.apiKeys.create((await s.users.byId(user.id))!, { name: 'bench' } as any);
  const app = listen(s, 0, '127.0.0.1');
  console.log(JSON.stringify({ url: `http://127.0.0.1:${app.server!.port}`, key }));
  process.on('SIGTERM', async () => {
    await s.realtime.closeAll();
    await app.stop(true);
    await s.close();
    rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  });
}

if (role === '--upstream') await upstreamRole();
else if (role === '--gateway') await gatewayRole();
else await main();
