/** /v1/realtime relay mechanics over real sockets: handshake, byte-exact frames, order, pre-upgrade errors, upstream failures. */
import { describe, expect, test } from 'bun:test';
import { startRealtimeUpstream } from '../doubles/realtime-upstream';
import { PRICE, channel, expectError, open, realtimeSuite, refused, up, w } from '../helpers/realtime-wiring';

realtimeSuite();

describe('realtime relay', () => {
  test('handshake: Bearer key, upstream gets the channel key and the mapped model; session.created relayed', async () => {
    const c = open();
    await c.opened;
    const created = await c.waitFor('session.created');
    expect(created.session.model).toBe('gpt-realtime-2025');
    const conn = up.connections.at(-1)!;
    expect(conn.headers.authorization).toBe('Bearer up-key-1');
    expect(new URL(conn.url).searchParams.get('model')).toBe('gpt-realtime-2025');
    expect(JSON.stringify(conn.headers)).not.toContain('sk-good');
  });

  test('subprotocol key: answered with "realtime", the key is never echoed', async () => {
    const c = open('/v1/realtime?model=gpt-realtime', { protocols: ['realtime', 'openai-insecure-api-key.sk-good'] });
    await c.opened;
    expect(c.ws.protocol).toBe('realtime');
    await c.waitFor('session.created');
  });

  test('text frames are byte-exact both ways, even JSON a re-serialiser would change', async () => {
    const c = open();
    await c.opened;
    const odd = '{ "type" : "conversation.item.create",  "big": 12345678901234567890123456789, "f": 1.10, "s":"\\u00e9\\"q\\"" }';
    c.ws.send(odd);
    await up.until(() => up.received.some((r) => r.data === odd));
    await c.waitFrames(2);
    expect(c.frames[1]).toBe(odd);
    up.send('{"type":"x.custom","n":1e400,  "z":-0}', up.connections.at(-1)!.id);
    await c.waitFrames(3);
    expect(c.frames[2]).toBe('{"type":"x.custom","n":1e400,  "z":-0}');
  });

  test('binary frames are byte-exact both ways', async () => {
    const c = open();
    await c.opened;
    await c.waitFor('session.created');
    const bytes = new Uint8Array(70_000).map((_, i) => (i * 7 + 3) & 0xff);
    c.ws.send(bytes);
    await up.until(() => up.received.some((r) => r.binary && Buffer.compare(r.data as Buffer, Buffer.from(bytes)) === 0));
    await c.waitFrames(2);
    expect(Buffer.isBuffer(c.frames[1])).toBe(true);
    expect(Buffer.compare(c.frames[1] as Buffer, Buffer.from(bytes))).toBe(0);
    up.send(new Uint8Array([0, 255, 1, 254]), up.connections.at(-1)!.id);
    await c.waitFrames(3);
    expect([...(c.frames[2] as Buffer)]).toEqual([0, 255, 1, 254]);
  });

  test('many frames keep their order (sent before the upstream is even open)', async () => {
    const c = open();
    await c.opened;
    const n = 500;
    for (let i = 0; i < n; i++) c.ws.send(i % 5 === 0 ? new Uint8Array([i & 0xff, i >> 8]) : `{"type":"x.seq","i":${i}}`);
    await c.waitFrames(n + 1);
    const conn = up.connections.at(-1)!.id;
    const got = up.received.filter((r) => r.conn === conn);
    expect(got.length).toBe(n);
    got.forEach((r, i) => {
      if (i % 5 === 0) expect([...(r.data as Buffer)]).toEqual([i & 0xff, i >> 8]);
      else expect(r.data).toBe(`{"type":"x.seq","i":${i}}`);
    });
    const echoed = c.frames.slice(1);
    echoed.forEach((f, i) => {
      if (i % 5 === 0) expect([...(f as Buffer)]).toEqual([i & 0xff, i >> 8]);
      else expect(f).toBe(`{"type":"x.seq","i":${i}}`);
    });
  });
});

/** A handshake that must fail before the upgrade: the HTTP status and the JSON error body. */
describe('realtime pre-upgrade errors', () => {
  const bearer = { authorization: 'Bearer sk-good' };
  test('401 without a key and with an unknown key (header or subprotocol)', async () => {
    expectError(await refused('/v1/realtime', {}), 401, 'missing_api_key');
    expectError(await refused('/v1/realtime', { authorization: 'Bearer sk-nope' }), 401, 'invalid_api_key');
    expectError(await refused('/v1/realtime', { 'sec-websocket-protocol': 'realtime, openai-insecure-api-key.sk-nope' }), 401, 'invalid_api_key');
    const c = open('/v1/realtime', { protocols: ['realtime', 'openai-insecure-api-key.sk-nope'] });
    expect(await c.opened.then(() => 'open', () => 'refused')).toBe('refused');
  });

  test('400 for a plain GET, answered at once', async () => {
    const t0 = performance.now();
    expectError(await refused('/v1/realtime', bearer, false), 400, 'websocket_required');
    expect(performance.now() - t0).toBeLessThan(1000);
  });

  test('403 model not allowed / IP not allowed; 404 unknown model; 503 no healthy channel; 402 no quota', async () => {
    const k = w.keys.get('sk-good')!;
    w.keys.set('sk-models', { ...k, models: ['other-model'] });
    w.keys.set('sk-ip', { ...k, allowIps: ['10.0.0.0/8'] });
    expectError(await refused('/v1/realtime?model=gpt-realtime', { authorization: 'Bearer sk-models' }), 403, 'model_not_allowed');
    expectError(await refused('/v1/realtime?model=gpt-realtime', { authorization: 'Bearer sk-ip' }), 403, 'ip_not_allowed');
    w.keys.set('sk-ip-ok', { ...k, allowIps: ['127.0.0.0/8'] });
    const ok = open('/v1/realtime?model=gpt-realtime', { headers: { authorization: 'Bearer sk-ip-ok' } });
    await ok.opened;
    expectError(await refused('/v1/realtime?model=nope', bearer), 404, 'model_not_found');
    w.channels.push(channel(99, up, { models: ['sleepy', 'unpriced'], status: 3 }));
    expectError(await refused('/v1/realtime?model=unpriced', bearer), 403, 'model_not_priced');
    await w.book.upsert({ ...PRICE, model: 'sleepy' });
    expectError(await refused('/v1/realtime?model=sleepy', bearer), 503, 'no_healthy_channel');
    w.keys.set('sk-poor', { ...k, unlimitedQuota: false, remainQuota: 0 });
    expectError(await refused('/v1/realtime?model=gpt-realtime', { authorization: 'Bearer sk-poor' }), 402, 'key_quota_exhausted');
  });

  test('missing model uses REALTIME_DEFAULT_MODEL (gpt-realtime by default)', async () => {
    const c = open('/v1/realtime');
    await c.opened;
    const created = await c.waitFor('session.created');
    expect(created.session.model).toBe('gpt-realtime-2025');
  });
});

describe('realtime upstream failures', () => {
  test('an upstream refusing the handshake: the next channel is used', async () => {
    const dead = startRealtimeUpstream();
    dead.refuseWith = 503;
    w.channels.push(channel(2, dead, { priority: 10 }));
    try {
      const c = open();
      await c.opened;
      c.ws.send('{"type":"x.early"}');
      await c.waitFor('session.created');
      await c.waitFor('x.early');
      expect(up.received.some((r) => r.data === '{"type":"x.early"}')).toBe(true);
    } finally {
      w.channels.splice(w.channels.findIndex((x) => x.id === 2), 1);
      await dead.stop();
    }
  });

  test('no upstream reachable: error event, then close 1013', async () => {
    up.refuseWith = 502;
    const c = open();
    await c.opened;
    const close = await c.waitClose();
    expect(close.code).toBe(1013);
    const err = c.events().find((e) => e.type === 'error');
    expect(err.error.code).toBe('upstream_unavailable');
  });

  test('upstream drops mid-session: error event, then close 1011', async () => {
    const c = open();
    await c.opened;
    await c.waitFor('session.created');
    up.drop();
    const close = await c.waitClose();
    expect(close.code).toBe(1011);
    expect(c.events().at(-1).type).toBe('error');
    expect(c.events().at(-1).error.code).toBe('upstream_disconnected');
  });

  test('upstream closes normally: client gets the same close code and reason', async () => {
    const c = open();
    await c.opened;
    await c.waitFor('session.created');
    up.closeAll(1000, 'bye now');
    expect(await c.waitClose()).toEqual({ code: 1000, reason: 'bye now' });
  });

  test('client drops: the upstream socket is closed too', async () => {
    const c = open();
    await c.opened;
    await c.waitFor('session.created');
    const conn = up.connections.at(-1)!;
    c.ws.close(4000, 'done here');
    await up.until(() => conn.closed !== null);
    expect(conn.closed).toEqual({ code: 4000, reason: 'done here' });
    c.ws.terminate();
  });
});

