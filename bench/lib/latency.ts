/**
 * Latency samples of one bench phase and their percentiles. p99.9 needs about 10,000 samples to mean
 * anything: at one connection that is a few seconds of requests, so tail runs last 30 s (BENCH_SECONDS).
 */

/** The value at percentile p (0..100) of an ascending array; NaN when empty. */
export const pct = (sorted: number[], p: number): number => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]! : NaN);

export interface Quantiles { p50: number; p99: number; p999: number; max: number; n: number }

/** Sorts in place and summarises (ms). */
export function quantiles(samples: number[]): Quantiles {
  samples.sort((a, b) => a - b);
  return { p50: pct(samples, 50), p99: pct(samples, 99), p999: pct(samples, 99.9), max: samples.length ? samples[samples.length - 1]! : NaN, n: samples.length };
}

/** `keys`: several relay keys (BENCH_USERS); connection i sends as keys[i % n] instead of headers' own x-api-key. */
export interface Target { url: string; headers: Record<string, string>; keys?: string[] }

export interface Samples { lat: number[]; ttft: number[]; errors: number }

/**
 * Sends /v1/messages requests over `concurrency` connections for `seconds`, appending each successful
 * request's total time and its time to the first body chunk (`ttft`: the first SSE bytes of a stream, the
 * first bytes of a JSON answer, which on PostgreSQL arrive before the settlement's commit) to `into`.
 * `thinkMs`: a pause between one connection's requests.
 */
export async function load(t: Target, stream: boolean, concurrency: number, seconds: number, into: Samples = { lat: [], ttft: [], errors: 0 }, maxRequests = 1_000_000, thinkMs = 0): Promise<Samples> {
  const body = JSON.stringify({ model: 'bench-model', max_tokens: 64, stream, messages: [{ role: 'user', content: 'Say hello.' }] });
  const end = performance.now() + seconds * 1000;
  let started = 0;
  const worker = async (_: unknown, i: number) => {
    const headers = t.keys?.length ? { ...t.headers, 'x-api-key': t.keys[i % t.keys.length]! } : t.headers;
    while (performance.now() < end && started < maxRequests) {
      started++;
      const t0 = performance.now();
      try {
        const res = await fetch(`${t.url}/v1/messages`, { method: 'POST', headers, body });
        let first = -1;
        const reader = res.body!.getReader();
        for (;;) {
          const { done } = await reader.read();
          if (first < 0) first = performance.now() - t0;
          if (done) break;
        }
        if (res.status !== 200) into.errors++;
        else {
          into.lat.push(performance.now() - t0);
          if (first >= 0) into.ttft.push(first);
        }
      } catch {
        into.errors++;
      }
      // A client that reads its answer before it asks again (the previous request's trailing work is then not in this one's time).
      if (thinkMs) await Bun.sleep(thinkMs);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return into;
}
