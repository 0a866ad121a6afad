import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { setTrustProxy } from '../../apps/server/src/plugins/client-ip';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfWindowEdge } from '../helpers/window-edge';
import { addChannel, keyedUser, msg, send, setPrice, upstream, V, type Scripted } from './relay-setup';

/**
 * Behind a trusted proxy the client address is read from X-Forwarded-For (README: TRUST_PROXY). Proxies and load
 * balancers write entries with a port (`1.2.3.4:5678`, `[2001:db8::1]:443`), in brackets, quoted or padded: each
 * must stand for its address, or a key's allow_ips refuses its own client and the per-address login limit counts
 * two spellings of one client apart. An entry that is no address at all must not give a fresh count per spelling.
 */
let gw: TestGateway;
let up: Scripted;
beforeAll(async () => {
  setTrustProxy(true); // the cluster's nodes read TRUST_PROXY themselves; the in-process node is told here
  gw = await startGateway({ TRUST_PROXY: 'true', LOGIN_IP_PER_MINUTE: '3', LOGIN_MAX_FAILURES: '100' });
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['fwd-model'] });
  await setPrice(gw, 'fwd-model');
}, 60_000); // a 3-node start on a loaded machine
afterAll(async () => { setTrustProxy(false); await up.stop(); await gw.stop(); });

describe('X-Forwarded-For entries', () => {
  test('an entry with a port, in brackets, quoted or padded is its address for a key\'s allow_ips', async () => {
    const k = await keyedUser(gw, 1_000_000, { allow_ips: ['203.0.113.5', '2001:db8::1'] });
    const from = (xff: string) => send(gw, k.key, msg('fwd-model'), { ...V, 'x-forwarded-for': xff });
    for (const xff of ['203.0.113.5', '203.0.113.5:5678', ' 203.0.113.5:5678 ', '"203.0.113.5"', '::ffff:203.0.113.5',
      '[::ffff:203.0.113.5]:80', '[2001:db8::1]:443', '[2001:db8::1]', '"[2001:db8::1]:443"', '2001:db8::1']) {
      const r = await from(xff);
      expect([xff, r.status]).toEqual([xff, 200]);
    }
    for (const xff of ['203.0.113.6:5678', '[2001:db8::2]:443', '203.0.113.5:notaport', '203.0.113.5:5678:1']) {
      const r = await from(xff);
      expect([xff, r.status, r.body.error?.code]).toEqual([xff, 403, 'ip_not_allowed']);
    }
    // X-Real-IP is not read: only X-Forwarded-For names the client.
    const real = await send(gw, k.key, msg('fwd-model'), { ...V, 'x-real-ip': '203.0.113.5' });
    expect([real.status, real.body.error?.code]).toEqual([403, 'ip_not_allowed']);
  }, 30_000);

  const login = (xff: string) => gw.api('POST', '/api/user/login', { username: `fwd-${crypto.randomUUID().slice(0, 8)}`, password: 'wrong-password' }, null, { 'x-forwarded-for': xff });

  test('per-address login limit: a port, brackets or quotes do not make another client', async () => {
    await clearOfWindowEdge(30_000); // all in one minute window, with room for a loaded machine
    for (const xff of ['198.51.100.7:1000', '198.51.100.7:1001', '[198.51.100.7]']) expect((await login(xff)).status).toBe(401);
    const fourth = await login('"198.51.100.7:1002"');
    expect([fourth.status, fourth.body.error.code]).toEqual([429, 'too_many_attempts']);
    // Another address is still its own client.
    expect((await login('198.51.100.8:1000')).status).toBe(401);
  }, 90_000);

  test('per-address login limit: entries that are no address share one count', async () => {
    // Every request naming a different non-address: before, each was a fresh count of its own.
    await clearOfWindowEdge(30_000);
    const statuses: number[] = [];
    for (let n = 0; n < 4; n++) statuses.push((await login(`garbage-${n}-${crypto.randomUUID()}`)).status);
    expect(statuses).toEqual([401, 401, 401, 429]);
  }, 90_000);
});
