/**
 * Keep-alive pings during upstream silence, over real HTTP, on a native and a translated channel: a
 * silent upstream gets `ping` events every SSE_KEEPALIVE_MS while the client waits, the answer is intact
 * around them, and the upstream idle limit (the channel's timeout) still cuts a dead upstream.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, eventNames, keyedUser, msg, send, setPrice, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let ant: Scripted;
let oai: Scripted;
let key: string;
beforeAll(async () => {
  gw = await startGateway({ SSE_KEEPALIVE_MS: '1000' });
  ant = upstream('anthropic');
  oai = upstream('openai');
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['claude-ka'] });
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['gpt-ka'] });
  for (const m of ['claude-ka', 'gpt-ka', 'claude-dead']) await setPrice(gw, m);
  key = (await keyedUser(gw)).key;
});
afterAll(async () => { await ant.stop(); await oai.stop(); await gw.stop(); });

const pings = (text: string) => [...text.matchAll(/^event: ping$/gm)].length;

describe('SSE keep-alive', () => {
  for (const [kind, model] of [['anthropic', 'claude-ka'], ['openai', 'gpt-ka']] as const) {
    test(`${kind}: pings while the upstream is silent, the answer is whole`, async () => {
      const s = kind === 'anthropic' ? ant : oai;
      // Silent after its first content event: what comes before it (message_start, a role-only delta) is held until
      // then, up to 2 s, and pings begin once the stream is committed.
      s.queue.push({ text: 'slow answer', pause: { afterFrames: 2, ms: 2600 } });
      const r = await send(gw, key, msg(model, { stream: true }));
      expect(r.status).toBe(200);
      const names = eventNames(r.text);
      expect(names[0]).toBe('message_start');
      expect(names.at(-1)).toBe('message_stop');
      // Baseline: the upstream's own pings (Anthropic sends one after message_start; so does the translator).
      const own = pings(r.text);
      s.queue.push({ text: 'fast answer' });
      const fast = await send(gw, key, msg(model, { stream: true }));
      expect(own - pings(fast.text)).toBeGreaterThanOrEqual(2); // a 2.6 s silence at a 1 s interval
      // Every ping is a whole event between whole events.
      expect(r.text).not.toMatch(/[^\n]event: ping/);
      expect(r.text.includes('"text":"slow')).toBe(true);
    }, 20_000);
  }

  test('pings do not hide a dead upstream: the channel timeout still ends the stream with an error event', async () => {
    const dead = upstream('anthropic', { text: 'never finished', pause: { afterFrames: 2, ms: 4000 } });
    try {
      const r0 = await gw.api('POST', '/api/channel/', { name: 'dead', type: 'anthropic', base_url: dead.url, key: 'k', models: ['claude-dead'], timeout_ms: 2500 });
      expect(r0.status).toBe(200);
      const r = await send(gw, key, msg('claude-dead', { stream: true }));
      expect(r.status).toBe(200);
      // The keep-alives at 1 s and 2 s (the upstream's own ping never came); a timer late by half a second on a
      // loaded machine may fold one into the check that cuts the stream, so at least one, at most two.
      expect(pings(r.text)).toBeGreaterThanOrEqual(1);
      expect(pings(r.text)).toBeLessThanOrEqual(2);
      expect(eventNames(r.text).at(-1)).toBe('error');
      expect(r.text).toContain('sent nothing for 2500 ms');
    } finally {
      await dead.stop();
    }
  }, 20_000);
});
