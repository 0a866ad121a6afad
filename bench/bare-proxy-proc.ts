/**
 * Benchmark floor: the thinnest possible proxy in front of the upstream (Bun.serve + fetch, body passed
 * through, no auth, routing, validation or metering). The gateway cannot beat this on this machine;
 * its distance from it is what the gateway's own work costs. Prints {"url"} on stdout.
 */
const upstream = process.argv[2]!;
const server = Bun.serve({
  port: 0,
  hostname: '127.0.0.1',
  async fetch(req) {
    const res = await fetch(`${upstream}/v1/messages`, { method: 'POST', headers: req.headers, body: await req.arrayBuffer() });
    return new Response(res.body, { status: res.status, headers: { 'content-type': res.headers.get('content-type') ?? 'application/json' } });
  },
});
console.log(JSON.stringify({ url: `http://127.0.0.1:${server.port}` }));
process.on('SIGTERM', () => process.exit(0));
