/**
 * Attack from the upstream side: a 200 JSON answer nested ~200,000 levels deep (400 kB of brackets, far under the
 * body cap). JSON.parse takes any depth; JSON.stringify overflows the stack near 100,000 levels. The relay decoded
 * such an answer and then re-serialised it outside the decode's guard: the RangeError escaped the attempt, the
 * client got 502 `upstream_error` at once, no other channel was tried and the channel's health never saw the fault.
 * Now it is a bad answer (502 `upstream_bad_response`, an upstream fault) and the next channel serves the request.
 * Real gateway, upstream doubles over HTTP; native (decoded: `content` before the head fields) and translated.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let bad: Scripted;
let badOpenAI: Scripted;
let good: Scripted;
let key: string;

const DEPTH = 200_000;
const deep = () => '['.repeat(DEPTH) + ']'.repeat(DEPTH);
const nativeDeep = () => `{"content":[{"type":"text","text":"hi","x":${deep()}}],"id":"msg_1","type":"message","role":"assistant","model":"m",`
  + '"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":3}}';
const openaiDeep = () => `{"id":"c","object":"chat.completion","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,`
  + `"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":${JSON.stringify(`{"a":${deep()}}`)}}}]}}],`
  + '"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}';
const json = (body: string) => () => new Response(body, { headers: { 'content-type': 'application/json' } });

beforeAll(async () => {
  gw = await startGateway({ RELAY_HEALTH_FAILURES: '1000' });
  bad = upstream('anthropic');
  badOpenAI = upstream('openai');
  good = upstream('anthropic', { text: 'from the good channel' });
  // The hostile channels first (higher priority), the good one behind each.
  await addChannel(gw, { type: 'anthropic', url: bad.url, models: ['deep-native', 'deep-alone'], priority: 10 });
  await addChannel(gw, { type: 'openai', url: badOpenAI.url, models: ['deep-openai'], priority: 10 });
  await addChannel(gw, { type: 'anthropic', url: good.url, models: ['deep-native', 'deep-openai'], priority: 0 });
  for (const m of ['deep-native', 'deep-openai', 'deep-alone']) await setPrice(gw, m);
  key = (await keyedUser(gw, 100_000_000)).key;
});
afterAll(async () => {
  await bad.stop();
  await badOpenAI.stop();
  await good.stop();
  await gw.stop();
});

test('native: a deeply nested JSON answer fails over to the next channel', async () => {
  bad.queue.push({ response: json(nativeDeep()) });
  const hits = good.hits;
  const r = await send(gw, key, msg('deep-native'));
  expect(r.status).toBe(200);
  expect(r.body.content[0].text).toBe('from the good channel');
  expect(good.hits).toBe(hits + 1);
}, 30_000);

test('translated: deeply nested tool arguments fail over to the next channel', async () => {
  badOpenAI.queue.push({ response: json(openaiDeep()) });
  const hits = good.hits;
  const r = await send(gw, key, msg('deep-openai'));
  expect(r.status).toBe(200);
  expect(r.body.content[0].text).toBe('from the good channel');
  expect(good.hits).toBe(hits + 1);
}, 30_000);

test('with no other channel: 502 upstream_bad_response (an upstream fault), not upstream_error', async () => {
  bad.queue.push({ response: json(nativeDeep()) });
  const r = await send(gw, key, msg('deep-alone'));
  expect(r.status).toBe(502);
  expect(r.body.error.code).toBe('upstream_bad_response');
}, 30_000);
