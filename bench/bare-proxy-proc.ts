/**
 * Benchmark floor: the thinnest possible proxy in front of the upstream (Bun.serve + fetch, body passed
 * through, no auth, routing, validation or metering). The gateway cannot beat this on this machine;
 * its distance from it is what the gateway's own work costs. Prints {"url"} on stdout.
 * BENCH_BARE_MODE picks how the answer's body is relayed, to price each way of holding a stream:
 * `native` (default: Bun pipes the upstream body itself), `pull` (the upstream read in JS into a pull-based
 * ReadableStream, as the gateway did), `direct` (read in JS, written to a Bun "direct" ReadableStream).
 * BENCH_BARE_SMALL=1 sends a short body upstream whatever the client sent: shows that Bun's fetch, not the
 * server, keeps a request body for the whole response.
 */
const upstream = process.argv[2]!;
const SMALL = JSON.stringify({ model: 'bench-model', max_tokens: 16, stream: true, metadata: { user_id: 'hold' }, messages: [{ role: 'user', content: 'hold' }] });
const mode = process.env.BENCH_BARE_MODE ?? 'native';

function pullBody(body: ReadableStream<Uint8Array>): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  return new ReadableStream<Uint8Array>({
    async pull(c) {
      const r = await reader.read();
      if (r.done) c.close();
      else c.enqueue(r.value);
    },
    cancel(reason) { return reader.cancel(reason); },
  }, { highWaterMark: 0 });
}

function directBody(body: ReadableStream<Uint8Array>): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  return new ReadableStream<Uint8Array>({
    type: 'direct',
    async pull(c: { write(b: Uint8Array): void; flush(): unknown; close(): void }) {
      for (;;) {
        const r = await reader.read();
        if (r.done) return c.close();
        c.write(r.value);
        await c.flush();
      }
    },
    cancel(reason: unknown) { return reader.cancel(reason); },
  } as any);
}

const server = Bun.serve({
  port: 0,
  hostname: '127.0.0.1',
  async fetch(req) {
    const res = await fetch(`${upstream}/v1/messages`, { method: 'POST', headers: req.headers, body: process.env.BENCH_BARE_SMALL ? (await req.arrayBuffer(), SMALL) : await req.arrayBuffer() });
    const body = mode === 'pull' ? pullBody(res.body!) : mode === 'direct' ? directBody(res.body!) : res.body;
    return new Response(body, { status: res.status, headers: { 'content-type': res.headers.get('content-type') ?? 'application/json' } });
  },
});
console.log(JSON.stringify({ url: `http://127.0.0.1:${server.port}` }));
process.on('SIGTERM', () => process.exit(0));
export {};
