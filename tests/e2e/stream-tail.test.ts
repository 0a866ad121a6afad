/**
 * An upstream that sends the whole answer (message_stop; or finish and usage) and then keeps the
 * connection open. The relay closes it itself after a short grace: the client's stream ends normally,
 * well before the channel's idle timeout, billed from the reported usage, and the channel keeps its
 * health. Waiting for the idle timeout instead held the client's end (in PostgreSQL mode its last byte)
 * for the whole timeout and then appended an error event to a complete answer.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, eventNames, keyedUser, msg, setPrice, upstream, V, type Scripted } from './relay-setup';

let gw: TestGateway;
const ups: Scripted[] = [];
beforeAll(async () => { gw = await startGateway({ RELAY_HEALTH_FAILURES: '1', RELAY_PROBE_INTERVAL_MS: '3600000' }); });
afterAll(async () => { for (const u of ups) await u.stop(); await gw.stop(); });

const enc = new TextEncoder();
const sse = (event: string | null, data: unknown) => `${event ? `event: ${event}\n` : ''}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;

/**
 * An SSE response that sends `frames` and then never closes (until the gateway cancels it); with
 * `trickle`, it goes on sending a ping every 200 ms (activity that would reset an idle limit).
 */
function openEnded(frames: string[], cancelled: { n: number }, trickle = false) {
  let timer: ReturnType<typeof setInterval> | undefined;
  return () => new Response(new ReadableStream({
    start(c) {
      c.enqueue(enc.encode(frames.join('')));
      if (trickle) timer = setInterval(() => { try { c.enqueue(enc.encode(sse('ping', { type: 'ping' }))); } catch { clearInterval(timer); } }, 200);
    },
    cancel() { clearInterval(timer); cancelled.n++; },
  }), { headers: { 'content-type': 'text/event-stream' } });
}

const ANTHROPIC = [
  sse('message_start', { type: 'message_start', message: { id: 'msg_t', type: 'message', role: 'assistant', model: 'up', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 11, output_tokens: 1 } } }),
  sse('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }),
  sse('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'whole answer' } }),
  sse('content_block_stop', { type: 'content_block_stop', index: 0 }),
  sse('message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 7 } }),
  sse('message_stop', { type: 'message_stop' }),
];
const chunk = (o: object) => sse(null, { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'up', ...o });
const OPENAI = [
  chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: 'whole answer' }, finish_reason: null }] }),
  chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }),
  chunk({ choices: [], usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 } }),
  // no [DONE], no close
];

for (const [kind, frames, trickle] of [['anthropic', ANTHROPIC, false], ['openai', OPENAI, false], ['anthropic', ANTHROPIC, true]] as const) {
  test(`${kind}: a whole answer whose upstream never closes${trickle ? ' (and keeps sending pings)' : ''} ends normally within the grace, billed once, channel healthy`, async () => {
    const model = `tail-${kind}${trickle ? '-ping' : ''}`;
    await setPrice(gw, model);
    const u0 = upstream(kind);
    ups.push(u0);
    const cancelled = { n: 0 };
    u0.fallback = { response: openEnded(frames, cancelled, trickle) };
    const channel = await addChannel(gw, { type: kind, url: u0.url, models: [model] });
    const u = await keyedUser(gw, 1_000_000);
    const t0 = performance.now();
    const res = await fetch(`${gw.url}/v1/messages`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': u.key, ...V },
      body: JSON.stringify(msg(model, { stream: true })),
    });
    const text = await res.text();
    const took = performance.now() - t0;
    expect(res.status).toBe(200);
    // The channel's idle timeout is 5 s (addChannel's timeout_ms); the grace is 1 s.
    expect(took).toBeGreaterThan(900);
    expect(took).toBeLessThan(3000);
    expect(eventNames(text)).toEqual(['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
    expect(text).toContain('"output_tokens":7');
    // Nothing follows message_stop, not even the upstream's pings.
    expect([...text.matchAll(/^event: (.+)$/gm)].at(-1)![1]).toBe('message_stop');
    let rows: Array<{ error_code: string | null; output_tokens: number; cost: number }> = [];
    for (let i = 0; i < 100 && rows.length < 1; i++) {
      rows = await gw.db.all('select error_code, output_tokens, cost from usage_logs where user_id = ?', u.id);
      if (!rows.length) await Bun.sleep(20);
    }
    expect(rows.length).toBe(1);
    expect(rows[0]!.error_code || '').toBe('');
    expect(rows[0]!.output_tokens).toBe(7);
    // 11 input at 1,000,000 and 7 output at 2,000,000 per million tokens: 11 + 14 units.
    expect(Number(rows[0]!.cost)).toBe(25);
    expect(gw.services.channelRegistry.get(channel)!.status).toBe(1);
    for (let i = 0; i < 50 && cancelled.n < 1; i++) await Bun.sleep(20);
    expect(cancelled.n).toBe(1);
  }, 15_000);
}
