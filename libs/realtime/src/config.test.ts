import { expect, test } from 'bun:test';
import { realtimeConfig } from './config';

test('frame and read bounds: defaults sized for real clients (a 15 MiB audio append), overridable, bad values refused', () => {
  const d = realtimeConfig({});
  expect(d.maxFrameBytes).toBe(21 * 1024 * 1024);
  expect(d.maxFrameBytes).toBeGreaterThan(Math.ceil((15 * 1024 * 1024 * 4) / 3));
  expect(d.maxEventBytes).toBe(8 * 1024 * 1024);
  expect(d.maxUpstreamFrameBytes).toBe(16 * 1024 * 1024);
  expect(d.readBytesPerSecond).toBe(4 * 1024 * 1024);
  expect(d.closeGraceMs).toBe(3000);
  expect(realtimeConfig({ REALTIME_CLOSE_GRACE_MS: '0' }).closeGraceMs).toBe(0);
  const c = realtimeConfig({ REALTIME_MAX_FRAME_BYTES: '65536', REALTIME_MAX_EVENT_BYTES: '4096', REALTIME_MAX_UPSTREAM_FRAME_BYTES: '8192', REALTIME_READ_BYTES_PER_SECOND: '0' });
  expect([c.maxFrameBytes, c.maxEventBytes, c.maxUpstreamFrameBytes, c.readBytesPerSecond]).toEqual([65536, 4096, 8192, 0]);
  expect(() => realtimeConfig({ REALTIME_MAX_EVENT_BYTES: '10' })).toThrow('REALTIME_MAX_EVENT_BYTES');
  expect(() => realtimeConfig({ REALTIME_READ_BYTES_PER_SECOND: '-1' })).toThrow('REALTIME_READ_BYTES_PER_SECOND');
});

test('liveness bounds: a stalled client after 30 s, a silent one after Bun\'s 120 s idle timeout; the timeout cannot be turned off', () => {
  const d = realtimeConfig({});
  expect([d.clientStallMs, d.idleTimeoutSeconds]).toEqual([30_000, 120]);
  const c = realtimeConfig({ REALTIME_CLIENT_STALL_MS: '1000', REALTIME_IDLE_TIMEOUT_SECONDS: '8' });
  expect([c.clientStallMs, c.idleTimeoutSeconds]).toEqual([1000, 8]);
  // A stalled client's socket is paused, and Bun suspends a paused socket's idle timeout: the stall check is its only bound.
  for (const v of ['0', '999']) expect(() => realtimeConfig({ REALTIME_CLIENT_STALL_MS: v })).toThrow('REALTIME_CLIENT_STALL_MS');
  // 0 would stop Bun's timeout and pings (a gone client never noticed); 1 to 7 Bun rounds up to 8; past 960 Bun refuses.
  for (const v of ['0', '7', '961']) expect(() => realtimeConfig({ REALTIME_IDLE_TIMEOUT_SECONDS: v })).toThrow('REALTIME_IDLE_TIMEOUT_SECONDS');
});
