/**
 * An OpenAI-compatible upstream that refuses `stream_options` (older Azure OpenAI api-versions, some proxies answer
 * 400 to a field they do not know), over real HTTP through a gateway: the refused stream is sent once more without
 * it and answered, the channel is remembered so later streams go without it at once, and such streams are billed
 * once, on the gateway's estimates, flagged `estimated`. A 400 that only quotes the client's text naming
 * `stream_options` teaches nothing: the usage of every later stream still comes from the upstream.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { startOpenAIUpstream } from '../doubles/openai-upstream';
import type { UpstreamDouble } from '../doubles/sse';
import { addChannel, keyedUser, msg, nodeOne, send, setPrice, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let old: UpstreamDouble;
let echo: Scripted;
beforeAll(async () => {
  gw = await startGateway({ RELAY_PROBE_INTERVAL_MS: '3600000' });
  old = startOpenAIUpstream({ refuseStreamOptions: true });
  old.script(() => ({ text: 'Hello from an old api-version' }));
  await addChannel(gw, { type: 'openai', url: old.url, models: ['old-azure'] });
  echo = upstream('openai');
  await addChannel(gw, { type: 'openai', url: echo.url, models: ['echoing'] });
  for (const m of ['old-azure', 'echoing']) await setPrice(gw, m);
}, 30_000);
afterAll(async () => { await old.stop(); await echo.stop(); await gw.stop(); });

const textOf = (sse: string) => [...sse.matchAll(/"text":"([^"]*)"/g)].map((m) => m[1]).join('');
async function rowOf(requestId: string | null) {
  gw.services.relay.quota.flush();
  return gw.db.all('select status, output_tokens, cost, usage_flag, error_code from usage_logs where request_id = ?', requestId);
}

describe('an upstream that refuses stream_options', () => {
  test('the stream is asked again without it and answered; later streams go without it at once; billed once, on estimates', async () => {
    const u = await keyedUser(gw);
    const before = old.count;
    const r = await send(nodeOne(gw), u.key, msg('old-azure', { stream: true }));
    expect(r.status).toBe(200);
    expect(textOf(r.text)).toBe('Hello from an old api-version');
    expect(r.text).toContain('message_stop');
    const sent = old.requests.slice(before).map((q) => q.body.stream_options);
    expect(sent).toEqual([{ include_usage: true }, undefined]);
    const rows = await rowOf(r.headers.get('request-id'));
    expect(rows).toEqual([{ status: 200, output_tokens: expect.any(Number), cost: expect.any(Number), usage_flag: 'estimated', error_code: '' }]);
    expect(rows[0].output_tokens).toBeGreaterThan(0);
    // Remembered: the next stream is sent without it the first time.
    const r2 = await send(nodeOne(gw), u.key, msg('old-azure', { stream: true }));
    expect(r2.status).toBe(200);
    expect(old.count - before).toBe(3);
    expect(old.requests.at(-1)!.body.stream_options).toBeUndefined();
    gw.services.relay.quota.flush();
    const all = await gw.db.all('select cost from usage_logs where user_id = ?', u.id);
    expect(all.length).toBe(2);
    expect(await gw.services.ledger.sum(u.id)).toBe(1_000_000 - all[0].cost - all[1].cost);
  });
});

describe('a 400 that quotes the client\'s text naming stream_options', () => {
  test('asked again once, the client gets the 400, and the channel keeps getting stream_options (its usage billed as reported)', async () => {
    const u = await keyedUser(gw);
    const quoted = { status: 400, message: "Invalid content in messages[0]: 'please set stream_options'" };
    echo.queue.push({ error: quoted }, { error: quoted });
    const before = echo.hits;
    const r = await send(nodeOne(gw), u.key, msg('echoing', { stream: true, messages: [{ role: 'user', content: 'please set stream_options' }] }));
    expect(r.status).toBe(400);
    expect(echo.hits - before).toBe(2);
    const r2 = await send(nodeOne(gw), u.key, msg('echoing', { stream: true }));
    expect(r2.status).toBe(200);
    expect(echo.last().body.stream_options).toEqual({ include_usage: true });
    expect(await rowOf(r2.headers.get('request-id'))).toEqual([{ status: 200, output_tokens: expect.any(Number), cost: expect.any(Number), usage_flag: '', error_code: '' }]);
  });
});

describe('a 400 quoting the client\'s text naming stream_options, then an accepted retry', () => {
  // A filter that refused the first time and let the same text through the second (or any 400 that comes and goes):
  // the retry was accepted, so the channel was learnt as refusing stream_options and every stream on it for an hour,
  // anyone's, was billed on the gateway's estimates instead of the upstream's usage.
  test('the client is answered, and the channel still gets stream_options (its usage billed as reported)', async () => {
    const u = await keyedUser(gw);
    echo.queue.push({ error: { status: 400, message: "Invalid content in messages[0]: 'what is stream_options'" } });
    const r = await send(nodeOne(gw), u.key, msg('echoing', { stream: true, messages: [{ role: 'user', content: 'what is stream_options' }] }));
    expect(r.status).toBe(200);
    const r2 = await send(nodeOne(gw), u.key, msg('echoing', { stream: true }));
    expect(r2.status).toBe(200);
    expect(echo.last().body.stream_options).toEqual({ include_usage: true });
    expect(await rowOf(r2.headers.get('request-id'))).toEqual([{ status: 200, output_tokens: expect.any(Number), cost: expect.any(Number), usage_flag: '', error_code: '' }]);
  });
});
