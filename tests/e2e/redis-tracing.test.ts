/**
 * ioredis on Bun traced every command for nobody (Bun's TracingChannel has no `hasSubscribers`, which ioredis
 * reads as "someone listens"): the PostgreSQL mode's backend supplies the getter before its first command.
 * Through real HTTP: a metered request's hold goes to Redis untraced, and a tracer that subscribes still
 * sees the admission's commands.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import dc from 'node:diagnostics_channel';
import { ON_PG, startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, setPrice, upstream, V, type Scripted } from './relay-setup';

let gw: TestGateway;
let ant: Scripted;

// PostgreSQL mode only: the SQLite mode opens no Redis connection.
describe.skipIf(!ON_PG)('Redis commands of a metered request', () => {
  beforeAll(async () => {
    gw = await startGateway();
    ant = upstream('anthropic', { usage: { input: 10, output: 20 } });
    await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['traced'] });
    await setPrice(gw, 'traced', { input: 1_000_000, output: 1_000_000 });
  });
  afterAll(async () => { await ant?.stop(); await gw?.stop(); });

  const send = async (key: string) => {
    // To node 1 itself: it runs in this process, where the channel is observed (behind a cluster proxy too).
    const res = await fetch(`${gw.nodeUrl}/v1/messages`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key, ...V }, body: JSON.stringify(msg('traced', { max_tokens: 100 })),
    });
    expect(res.status).toBe(200);
    await res.text();
  };

  test('are not traced while nobody listens, and are for a subscriber', async () => {
    const u = await keyedUser(gw, 10_000);
    const ch = dc.tracingChannel('ioredis:command');
    expect(ch.hasSubscribers).toBe(false);
    await send(u.key);

    const seen: string[] = [];
    const tracer = { start: (m: unknown) => { seen.push((m as { command: string }).command); }, end: () => {}, asyncStart: () => {}, asyncEnd: () => {}, error: () => {} };
    ch.subscribe(tracer);
    try {
      expect(ch.hasSubscribers).toBe(true);
      await send(u.key);
    } finally {
      ch.unsubscribe(tracer);
    }
    // The hold (reserve) and its release after the commit, at least: scripts run as EVALSHA.
    expect(seen.filter((c) => c === 'evalsha').length).toBeGreaterThanOrEqual(2);
    expect(ch.hasSubscribers).toBe(false);
  });
});
