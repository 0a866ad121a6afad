import { afterAll, expect, test } from 'bun:test';
import { ProviderApiError, callProvider } from './provider';

// An answer that never ends: a hostile or broken provider must not fill the gateway's memory until the deadline.
const endless = Bun.serve({
  port: 0, hostname: '127.0.0.1',
  fetch: () => new Response(new ReadableStream({ pull(c) { c.enqueue(new Uint8Array(64 * 1024).fill(32)); } }), { headers: { 'content-type': 'application/json' } }),
});
afterAll(() => endless.stop(true));

test('a provider answer larger than 1 MiB is not read: refused as a non-JSON answer, at once', async () => {
  const t0 = performance.now();
  const e = await callProvider('test', `http://127.0.0.1:${endless.port}/`, { method: 'POST' }, 10_000).catch((x) => x);
  expect(e).toBeInstanceOf(ProviderApiError);
  expect((e as Error).message).toContain('non-JSON');
  expect(performance.now() - t0).toBeLessThan(2_000);
});
