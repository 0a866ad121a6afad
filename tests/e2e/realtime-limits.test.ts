/** /v1/realtime limits over real sockets: sessions per key, handshake timeout, session length, backpressure, shutdown. */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';
import { bearerOf, channel, open, realtimeSuite, wire, type Wiring } from '../helpers/realtime-wiring';

realtimeSuite();

describe('realtime limits, backpressure and shutdown', () => {
  let g: Wiring;
  let u2: RealtimeUpstreamDouble;
  beforeAll(async () => {
    u2 = startRealtimeUpstream();
    // No read budget: the backpressure tests push 32 MB through one session, which the budget would spread over seconds
    // (tests/e2e/realtime-frame-limits.test.ts covers it).
    // No session length limit here: on a loaded machine the backpressure tests' 32 MB can take more than a short
    // limit would allow (the session was cut mid-test); the limit has its own gateway below.
    g = await wire({ REALTIME_MAX_SESSIONS_PER_KEY: '2', REALTIME_BUFFER_BYTES: '65536', REALTIME_CONNECT_TIMEOUT_MS: '200', REALTIME_READ_BYTES_PER_SECOND: '0' });
    g.channels.push(channel(1, u2));
  });
  afterAll(async () => {
    await g.stop();
    await u2.stop();
  });

  test('sessions per key are limited (429 before the upgrade) and the slot frees when a session ends', async () => {
    const { key } = await g.addKey(5_000_000);
    const a = open('/v1/realtime', bearerOf(key), g);
    const b = open('/v1/realtime', bearerOf(key), g);
    await Promise.all([a.opened, b.opened]);
    const h = { authorization: `Bearer ${key}`, connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' };
    const res = await fetch(`${g.url}/v1/realtime`, { headers: h });
    expect(res.status).toBe(429);
    expect(((await res.json()) as any).error.code).toBe('too_many_sessions');
    expect(res.headers.get('retry-after')).toBe('1');
    a.ws.close();
    await a.waitClose();
    await u2.until(() => g.service.liveCount === 1);
    const c = open('/v1/realtime', bearerOf(key), g);
    await c.opened;
    b.ws.close();
    c.ws.close();
  });

  test('an upstream that accepts TCP but never answers the handshake times out; the next channel serves', async () => {
    const silent = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } });
    g.channels.push(channel(7, { url: `http://127.0.0.1:${silent.port}` }, { priority: 5 }));
    try {
      const { key } = await g.addKey(5_000_000);
      const t0 = performance.now();
      const c = open('/v1/realtime', bearerOf(key), g);
      await c.opened;
      await c.waitFor('session.created');
      expect(performance.now() - t0).toBeGreaterThanOrEqual(190);
      c.ws.close();
      await c.waitClose();
    } finally {
      g.channels.splice(g.channels.findIndex((x) => x.id === 7), 1);
      silent.stop(true);
    }
  });

  test('slow client: the gateway stops reading the upstream instead of buffering; nothing is lost', async () => {
    const { key } = await g.addKey(5_000_000);
    const c = open('/v1/realtime', bearerOf(key), g);
    await c.opened;
    await c.waitFor('session.created');
    c.ws.pause();
    const conn = u2.connections.at(-1)!;
    const frame = (i: number) => `{"type":"x.bulk","i":${i},"pad":"${'a'.repeat(64 * 1024)}"}`;
    const n = 512; // 32 MB: more than the kernel buffers of both hops and Bun's 16 MB send queue
    for (let i = 0; i < n; i++) u2.send(frame(i), conn.id);
    await Bun.sleep(150);
    // The gateway paused its upstream socket, so the double still holds much of the data.
    expect(u2.unsent(conn.id)).toBeGreaterThan(4 * 1024 * 1024);
    c.ws.resume();
    await c.waitFrames(n + 1, 4000);
    for (let i = 0; i < n; i++) expect(c.frames[i + 1]).toBe(frame(i));
    c.ws.close();
  }, 20_000);

  test('slow upstream: the gateway stops reading the client; nothing is lost', async () => {
    const { key } = await g.addKey(5_000_000);
    const c = open('/v1/realtime', bearerOf(key), g);
    await c.opened;
    await c.waitFor('session.created');
    u2.echo = false;
    const conn = u2.connections.at(-1)!;
    conn.ws.pause();
    const chunk = Buffer.alloc(64 * 1024, 7);
    const n = 512; // 32 MB: more than the kernel buffers of both hops can hold
    for (let i = 0; i < n; i++) { chunk.writeUInt32BE(i, 0); c.ws.send(chunk); }
    await Bun.sleep(150);
    // The gateway paused the client socket, so the data is still queued at the client.
    expect(c.ws.bufferedAmount).toBeGreaterThan(4 * 1024 * 1024);
    conn.ws.resume();
    await u2.until(() => u2.received.filter((r) => r.conn === conn.id).length === n, 10_000);
    const got = u2.received.filter((r) => r.conn === conn.id);
    got.forEach((r, i) => expect((r.data as Buffer).readUInt32BE(0)).toBe(i));
    u2.echo = true;
    c.ws.close();
  }, 20_000);

  test('shutdown closes live sessions with 1001 and records them', async () => {
    const { key, userId } = await g.addKey(5_000_000);
    const c = open('/v1/realtime', bearerOf(key), g);
    await c.opened;
    await c.waitFor('session.created');
    const conn = u2.connections.at(-1)!;
    const recorded = g.service.closeAll();
    expect((await c.waitClose()).code).toBe(1001);
    await recorded;
    expect(c.events().at(-1).error.code).toBe('server_shutdown');
    expect((g.h.sqlite.query('select close_code from realtime_sessions where user_id = ?').get(userId) as any).close_code).toBe(1001);
    await u2.until(() => conn.closed !== null);
    const r = await fetch(`${g.url}/v1/realtime`, { headers: { authorization: `Bearer ${key}`, connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' } });
    expect(r.status).toBe(503);
  });
});

describe('session length', () => {
  let l: Wiring;
  let u4: RealtimeUpstreamDouble;
  beforeAll(async () => {
    u4 = startRealtimeUpstream();
    l = await wire({ REALTIME_MAX_SESSION_SECONDS: '1', REALTIME_READ_BYTES_PER_SECOND: '0' });
    l.channels.push(channel(1, u4));
  });
  afterAll(async () => {
    await l.stop();
    await u4.stop();
  });

  test('a session reaching REALTIME_MAX_SESSION_SECONDS gets an error event and close 1008', async () => {
    const { key, userId } = await l.addKey(5_000_000);
    const c = open('/v1/realtime', bearerOf(key), l);
    await c.opened;
    const close = await c.waitClose(2500);
    expect(close.code).toBe(1008);
    expect(c.events().at(-1).error.code).toBe('session_time_limit');
    await u4.until(() => !!l.h.sqlite.query('select 1 from realtime_sessions where user_id = ?').get(userId));
    const s = l.h.sqlite.query('select close_code, duration_ms from realtime_sessions where user_id = ?').get(userId) as any;
    expect(s.close_code).toBe(1008);
    expect(s.duration_ms).toBeGreaterThanOrEqual(990);
  });
});

describe('a client that never reads', () => {
  let h: Wiring;
  let u3: RealtimeUpstreamDouble;
  beforeAll(async () => {
    u3 = startRealtimeUpstream();
    h = await wire({ REALTIME_BUFFER_BYTES: '65536', REALTIME_READ_BYTES_PER_SECOND: '0' });
    h.channels.push(channel(1, u3));
  });
  afterAll(async () => {
    await h.stop();
    await u3.stop();
  });

  test('a client that never reads, flooding events the gateway answers itself (refusals): the gateway stops reading it instead of queuing the answers; none is lost', async () => {
    const { key } = await h.addKey(5_000_000);
    const c = open('/v1/realtime', bearerOf(key), h);
    await c.opened;
    await c.waitFor('session.created');
    c.ws.pause();
    // A 59-byte model change the gateway refuses with a ~250-byte error event: 24 MB in asks for ~100 MB out, which the
    // gateway queued in its heap while the client read nothing (before: the heap grew by about that).
    const ev = '{"type":"session.update","session":{"model":"other-model"}}';
    const n = 400_000;
    Bun.gc(true);
    const heap = process.memoryUsage().heapUsed;
    for (let i = 0; i < n; i++) c.ws.send(ev);
    await Bun.sleep(1000);
    Bun.gc(true);
    const grown = process.memoryUsage().heapUsed - heap;
    // The gateway stopped reading the client once its answers backed up: it holds only what it had read by then.
    expect(grown).toBeLessThan(24 * 1024 * 1024);
    c.ws.resume();
    await c.waitFrames(n + 1, 20_000);
    expect(c.frames.slice(1).every((f) => String(f).includes('"model_change_not_allowed"'))).toBe(true);
    c.ws.close();
  }, 30_000);
});
