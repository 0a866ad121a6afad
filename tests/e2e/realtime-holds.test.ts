/**
 * Realtime holds are never left behind and a response is billed once (found by a review of the hold matching):
 * a client's hold smaller than the limit the upstream announces is given back, not left reserved until the
 * session ends; a response.done without an id is its running response's, not billed again at the end.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { SAMPLE_USAGE, startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';
import { RESPONSE_CREATE, bearerOf, channel, open, wire, type Wiring } from '../helpers/realtime-wiring';

let g: Wiring;
let u: RealtimeUpstreamDouble;
beforeAll(async () => {
  u = startRealtimeUpstream();
  g = await wire({ REALTIME_MAX_SESSIONS_PER_KEY: '0' });
  g.channels.push(channel(1, u));
});
afterAll(async () => { await g.stop(); await u.stop(); });

const rows = (userId: number) => g.h.sqlite.query("select cost, usage_flag, error_code from usage_logs where user_id = ? and kind = 'realtime'").all(userId) as any[];

async function session(balance: number) {
  const { key, userId } = await g.addKey(balance);
  const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key), g);
  await c.opened;
  await c.waitFor('session.created');
  return { c, userId };
}

describe('realtime holds', () => {
  test('a confirmed low session limit under an upstream announcing more: each response holds once, nothing stays reserved, a small balance serves all', async () => {
    // A balance that holds about two responses' reservations at the announced limit, not three.
    const { c, userId } = await session(3_000_000);
    c.ws.send('{"type":"session.update","session":{"type":"realtime","max_output_tokens":10}}');
    u.send(JSON.stringify({ type: 'session.updated', event_id: 'ev_su', session: { type: 'realtime', max_output_tokens: 10 } }), u.connections.at(-1)!.id);
    await c.waitFor('session.updated');
    for (let i = 1; i <= 3; i++) {
      c.ws.send(RESPONSE_CREATE);
      await c.waitFor('response.done', i);
      await Bun.sleep(30);
      g.quota.flush?.();
      // Between responses nothing is held: what can be spent is the balance.
      expect(g.quota.available(userId)).toBe(g.quota.balance(userId));
    }
    expect(c.events().some((e) => e.type === 'error')).toBe(false);
    expect(rows(userId)).toHaveLength(3);
    c.ws.close();
  });

  test('a response.done without an id is billed once, as its running response', async () => {
    const { c, userId } = await session(50_000_000);
    u.stopBefore = 'response.done';
    try {
      c.ws.send(RESPONSE_CREATE);
      await c.waitFor('response.created');
      await Bun.sleep(50);
      u.send(JSON.stringify({ type: 'response.done', event_id: 'ev_x', response: { object: 'realtime.response', status: 'completed', usage: SAMPLE_USAGE } }), u.connections.at(-1)!.id);
      await c.waitFor('response.done');
    } finally {
      u.stopBefore = null;
    }
    c.ws.close();
    await Bun.sleep(100);
    g.quota.flush?.();
    const billed = rows(userId);
    expect(billed).toHaveLength(1);
    expect(billed[0]).toMatchObject({ usage_flag: '', error_code: '' });
    expect(g.quota.available(userId)).toBe(g.quota.balance(userId));
  });
});
