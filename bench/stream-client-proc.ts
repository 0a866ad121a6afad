export {};
/**
 * One load-generator process of bench/streams.ts: opens argv[4] streams to the gateway at argv[2] with key
 * argv[3] (in waves of 200), each held open by the upstream after its first bytes. Prints one JSON line
 * when every stream is either open or refused, then holds them until SIGTERM.
 * Started with BUN_CONFIG_MAX_HTTP_REQUESTS above its stream count (Bun's fetch limit is per process).
 */
const [url, key, nArg] = process.argv.slice(2);
const n = Number(nArg);
// BENCH_BODY_BYTES: pad the prompt to about this size (a long conversation), to see what a held stream keeps of its request.
const pad = Number(process.env.BENCH_BODY_BYTES ?? 0);
const body = JSON.stringify({ model: 'bench-model', max_tokens: 16, stream: true, metadata: { user_id: 'hold' }, messages: [{ role: 'user', content: pad ? 'hold '.repeat(Math.ceil(pad / 5)) : 'hold' }] });
const headers = { 'content-type': 'application/json', 'vendor-version': '2023-06-01', 'anthropic-version': '2023-06-01', 'x-api-key': key! };
const ctrl = new AbortController();
let opened = 0;
let refused = 0;
const refusedMs: number[] = [];
const other = new Map<string, number>();
const one = async () => {
  const t0 = performance.now();
  try {
    const res = await fetch(`${url}/v1/messages`, { method: 'POST', headers, body, signal: ctrl.signal });
    if (res.status === 503) {
      const text = await res.text();
      if (text.includes('upstream_capacity')) { refused++; refusedMs.push(performance.now() - t0); return; }
    }
    const reader = res.body!.getReader();
    const first = await reader.read();
    if (res.status === 200 && !first.done && new TextDecoder().decode(first.value).includes('message_start')) {
      opened++;
      reader.read().catch(() => {});
      return;
    }
    other.set(String(res.status), (other.get(String(res.status)) ?? 0) + 1);
  } catch (e) {
    const k = (e as Error)?.name ?? 'error';
    other.set(k, (other.get(k) ?? 0) + 1);
  }
};
const t0 = performance.now();
for (let i = 0; i < n; i += 200) await Promise.all(Array.from({ length: Math.min(200, n - i) }, one));
refusedMs.sort((a, b) => a - b);
console.log(JSON.stringify({
  opened, refused, other: Object.fromEntries(other), seconds: (performance.now() - t0) / 1000,
  refusedP50: refusedMs[Math.floor(refusedMs.length / 2)] ?? null, refusedP99: refusedMs[Math.floor(refusedMs.length * 0.99)] ?? null,
}));
process.on('SIGTERM', () => { ctrl.abort(); process.exit(0); });
setInterval(() => {}, 1 << 30);
