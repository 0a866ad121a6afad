/** Realtime sessions hold a slot of the gateway-wide cap (MAX_UPSTREAM_CONNECTIONS) from admission to their end. */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';
import { bearerOf, channel, open, realtimeSuite, wire, type Wiring } from '../helpers/realtime-wiring';

realtimeSuite();

let g: Wiring;
let u: RealtimeUpstreamDouble;
beforeAll(async () => {
  u = startRealtimeUpstream();
  g = await wire({ MAX_UPSTREAM_CONNECTIONS: '2' });
  g.channels.push(channel(1, u));
});
afterAll(async () => {
  await g.stop();
  await u.stop();
});

test('past the cap: 503 overloaded_error before the upgrade, no quota held; the slot comes back when a session ends', async () => {
  const { key, userId } = await g.addKey(5_000_000);
  const a = open('/v1/realtime', bearerOf(key), g);
  const b = open('/v1/realtime', bearerOf(key), g);
  await Promise.all([a.opened, b.opened]);
  expect(g.slots.inUse).toBe(2);
  const available = g.quota.available(userId);
  const h = { authorization: `Bearer ${key}`, connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' };
  const res = await fetch(`${g.url}/v1/realtime`, { headers: h });
  expect(res.status).toBe(503);
  expect(await res.json()).toMatchObject({ error: { type: 'overloaded_error', code: 'upstream_capacity' } });
  expect(res.headers.get('retry-after')).toBe('1');
  expect(g.quota.available(userId)).toBe(available);
  a.ws.close();
  await a.waitClose();
  await u.until(() => g.slots.inUse === 1);
  const c = open('/v1/realtime', bearerOf(key), g);
  await c.opened;
  expect(g.slots.inUse).toBe(2);
  b.ws.close();
  c.ws.close();
  await u.until(() => g.slots.inUse === 0);
  // Refused after the slot was taken (no balance for the trial reservation): the slot is given back.
  const poor = await g.addKey(0);
  const bad = await fetch(`${g.url}/v1/realtime`, { headers: { ...h, authorization: `Bearer ${poor.key}` } });
  expect(bad.status).toBe(402);
  expect(g.slots.inUse).toBe(0);
});
