/**
 * `bun bench/realtime-flood.ts`: what one hostile realtime session costs everyone else on the node. One client
 * floods giant metered events (FLOOD_KIND: session.update, the default, or conversation.item.create; FLOOD_MB each,
 * default 15) as fast as the gateway reads them, while a second session's round trip (a small append echoed by the
 * upstream double) and `GET /health` are probed every PROBE_MS. Prints the probes' p50/p99/max and how many flood
 * frames the gateway forwarded upstream, for a quiet baseline phase and a flood phase (BENCH_SECONDS each, default 5).
 * Gateway settings come from this process's environment (REALTIME_*). The double and the gateway run as
 * subprocesses (bench/realtime.ts's roles, via bench/lib/realtime-roles.ts), and so does the flooder; numbers on a shared 2-core machine are rough.
 */
import { spawnRealtimeRoles } from './lib/realtime-roles';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const PROBE_MS = Number(process.env.PROBE_MS ?? 50);
const FLOOD_MB = Number(process.env.FLOOD_MB ?? 15);
const KIND = process.env.FLOOD_KIND ?? 'session.update';

const pad = 'a'.repeat(Math.floor(FLOOD_MB * 1024 * 1024));
const FLOOD = KIND === 'conversation.item.create'
  ? JSON.stringify({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: pad }] } })
  : JSON.stringify({ type: 'session.update', session: { instructions: pad } });
const PROBE = JSON.stringify({ type: 'input_audio_buffer.append', audio: Buffer.alloc(960, 7).toString('base64') });

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]! : NaN;
};
const fmt = (xs: number[]) => `p50 ${pct(xs, 50).toFixed(1)} ms  p99 ${pct(xs, 99).toFixed(1)} ms  max ${Math.max(...xs).toFixed(1)} ms  (n=${xs.length})`;

async function connect(url: string, key: string): Promise<WebSocket> {
  const ws = new WebSocket(url, { headers: { authorization: `Bearer ${key}` } } as any);
  await new Promise<void>((resolve, reject) => {
    ws.onmessage = () => resolve();
    ws.onerror = () => reject(new Error('cannot connect'));
  });
  return ws;
}

/** Round trips of one small frame on `ws` and /health fetches, one of each every PROBE_MS, for SECONDS. */
async function probe(ws: WebSocket, base: string): Promise<{ rt: number[]; health: number[]; lost: number }> {
  const rt: number[] = [];
  const health: number[] = [];
  let lost = 0;
  let t0 = 0;
  let waiting = false;
  ws.onmessage = () => { if (waiting) { rt.push(performance.now() - t0); waiting = false; } };
  const end = performance.now() + SECONDS * 1000;
  while (performance.now() < end) {
    if (waiting) lost++; // the previous round trip took longer than PROBE_MS: counted as its own sample later
    if (!waiting) { t0 = performance.now(); waiting = true; ws.send(PROBE); }
    const h0 = performance.now();
    await fetch(`${base}/health`).then((r) => r.text());
    health.push(performance.now() - h0);
    await Bun.sleep(PROBE_MS);
  }
  return { rt, health, lost };
}

/** The flooder, in its own process so its sending does not delay this process's probes: floods for `ms`, prints its counts. */
async function floodRole(wsUrl: string, key: string, ms: number) {
  const attacker = await connect(wsUrl, key);
  let sent = 0;
  let echoed = 0;
  let errors = 0;
  let closed: string | null = null;
  attacker.onmessage = (e) => {
    if (typeof e.data === 'string' && e.data.startsWith('{"type":"error"')) errors++;
    else echoed++;
  };
  attacker.onclose = (e) => { closed = `${e.code} ${e.reason}`; };
  const end = performance.now() + ms;
  while (performance.now() < end && !closed) {
    // Two frames in flight at most: the gateway's reading, not the client's socket, sets the pace.
    if (attacker.bufferedAmount < 2 * FLOOD.length) { attacker.send(FLOOD); sent++; }
    await Bun.sleep(1);
  }
  console.log(JSON.stringify({ sent, echoed, errors, closed }));
  process.exit(0);
}

async function main() {
  const roles = await spawnRealtimeRoles(import.meta.dir);
  try {
    const { url, key } = roles.gateway;
    const wsUrl = `${url.replace('http', 'ws')}/v1/realtime?model=gpt-realtime`;
    console.log(`realtime flood bench: ${SECONDS}s per phase, probe every ${PROBE_MS} ms, flood ${KIND} of ${(FLOOD.length / 1048576).toFixed(1)} MiB`);
    const victim = await connect(wsUrl, key);
    const quiet = await probe(victim, url);
    console.log(`quiet   round trip: ${fmt(quiet.rt)}`);
    console.log(`quiet   /health   : ${fmt(quiet.health)}`);
    const flooder = Bun.spawn(['bun', import.meta.path, '--flood', wsUrl, key, String(SECONDS * 1000 + 600)], { stdout: 'pipe', stderr: 'inherit', env: process.env });
    await Bun.sleep(300);
    const flood = await probe(victim, url);
    const counts = JSON.parse((await new Response(flooder.stdout).text()).trim().split('\n').at(-1)!);
    console.log(`flood   round trip: ${fmt(flood.rt)}  (probes still waiting when the next was due: ${flood.lost})`);
    console.log(`flood   /health   : ${fmt(flood.health)}`);
    console.log(`flooder: ${counts.sent} frames sent, ${counts.echoed} echoed back by the upstream (forwarded), ${counts.errors} error events, close: ${counts.closed ?? 'none'}`);
    victim.close();
  } finally {
    await roles.stop();
  }
}

if (process.argv[2] === '--flood') await floodRole(process.argv[3]!, process.argv[4]!, Number(process.argv[5]));
else await main();
