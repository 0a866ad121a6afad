/**
 * Attack from the upstream side: a 200 JSON answer nested ~200,000 levels deep (400 kB of brackets, far under the
 * body cap). JSON.parse takes any depth; JSON.stringify overflows the stack near 100,000 levels. The relay decoded
 * such an answer and then re-serialised it outside the decode's guard: the RangeError escaped the attempt, the
 * client got 502 `upstream_error` at once, no other channel was tried and the channel's health never saw the fault.
 * Now it is a bad answer (502 `upstream_bad_response`, an upstream fault) and the next channel serves the request.
 * Real gateway, upstream doubles over HTTP; native (decoded: `content` before the head fields) and translated.
 *
 * The same for an answer of millions of tiny values: 24 MiB of `{},` (under the 32 MiB body cap) is 8 million objects,
 * about 700 MB of heap and a second of the event loop to parse, per answer, on the node every other user shares. The
 * relay parsed it and served it. Now a linear scan refuses more than a million values (far above a 128k-token answer)
 * before anything is built.
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
  + `"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"},"x":${deep()}}]}}],`
  + '"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}';
const json = (body: string) => () => new Response(body, { headers: { 'content-type': 'application/json' } });

beforeAll(async () => {
  gw = await startGateway({ RELAY_HEALTH_FAILURES: '1000' });
  bad = upstream('anthropic');
  badOpenAI = upstream('openai');
  good = upstream('anthropic', { text: 'from the good channel' });
  // The hostile channels first (higher priority), the good one behind each.
  await addChannel(gw, { type: 'anthropic', url: bad.url, models: ['deep-native', 'deep-alone', 'wide-native'], priority: 10 });
  await addChannel(gw, { type: 'openai', url: badOpenAI.url, models: ['deep-openai', 'wide-openai'], priority: 10 });
  await addChannel(gw, { type: 'anthropic', url: good.url, models: ['deep-native', 'deep-openai', 'wide-native', 'wide-openai'], priority: 0 });
  for (const m of ['deep-native', 'deep-openai', 'deep-alone', 'wide-native', 'wide-openai']) await setPrice(gw, m);
  key = (await keyedUser(gw, 100_000_000)).key;
});
afterAll(async () => {
  await bad.stop();
  await badOpenAI.stop();
  await good.stop();
  await gw.stop();
});

for (const [kind, model, answer] of [['native', 'deep-native', nativeDeep], ['translated', 'deep-openai', openaiDeep]] as const) {
  test(`${kind}: a deeply nested JSON answer fails over to the next channel`, async () => {
    (kind === 'native' ? bad : badOpenAI).queue.push({ response: json(answer()) });
    const hits = good.hits;
    const r = await send(gw, key, msg(model));
    expect(r.status).toBe(200);
    expect(r.body.content[0].text).toBe('from the good channel');
    expect(good.hits).toBe(hits + 1);
  }, 30_000);
}

test('with no other channel: 502 upstream_bad_response (an upstream fault), not upstream_error', async () => {
  bad.queue.push({ response: json(nativeDeep()) });
  const r = await send(gw, key, msg('deep-alone'));
  expect(r.status).toBe(502);
  expect(r.body.error.code).toBe('upstream_bad_response');
}, 30_000);

const WIDE = 8_000_000;
const empties = (n: number) => '{},'.repeat(n - 1) + '{}';

test('native: an answer of 8 million empty blocks (24 MiB) is refused unparsed and fails over', async () => {
  bad.queue.push({ response: json(`{"content":[${empties(WIDE)}],"id":"msg_1","type":"message","role":"assistant","model":"m","stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":3}}`) });
  const hits = good.hits;
  const t0 = performance.now();
  const r = await send(gw, key, msg('wide-native'));
  const ms = performance.now() - t0;
  expect(r.status).toBe(200);
  expect(r.body.content).toHaveLength(1);
  expect(r.body.content[0].text).toBe('from the good channel');
  expect(good.hits).toBe(hits + 1);
  console.log(`8M-value native answer refused in ${ms.toFixed(0)} ms`);
}, 60_000);

test('translated: tool arguments (a string, parsed apart) of 8 million values become `{}` unparsed; the answer is served', async () => {
  const args = JSON.stringify(`{"rows":[${empties(WIDE)}]}`);
  badOpenAI.queue.push({ response: json(`{"id":"c","object":"chat.completion","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\\"a\\":1}"}},{"id":"call_2","type":"function","function":{"name":"g","arguments":${args}}}]}}],"usage":{"prompt_tokens":5,"completion_tokens":3}}`) });
  const t0 = performance.now();
  const r = await send(gw, key, msg('wide-openai'));
  const ms = performance.now() - t0;
  expect(r.status).toBe(200);
  // Before, the 8 million objects were built and relayed as the input (a 24 MiB answer, over a second of the event loop).
  expect(r.body.content.map((b: any) => [b.name, b.input])).toEqual([['f', { a: 1 }], ['g', {}]]);
  console.log(`8M-value tool arguments answered in ${ms.toFixed(0)} ms`);
}, 60_000);

// Through the scans, not around them: a native answer with its head fields first passes as bytes, unscanned (as a
// scripted one did here, which passed with the bound at 1,000 values), so the native one has `content` first.
const table = { rows: Array.from({ length: 50_000 }, (_, i) => [i, `a, [b] {c} "d" \\${i}`, true]) };
const nativeTable = () => JSON.stringify({ content: [{ type: 'tool_use', id: 'toolu_1', name: 'table', input: table }], id: 'msg_1', type: 'message',
  role: 'assistant', model: 'm', stop_reason: 'tool_use', usage: { input_tokens: 5, output_tokens: 3 } });
for (const [kind, model] of [['native', 'wide-native'], ['translated', 'wide-openai']] as const) {
  test(`${kind}: a real large structured answer is scanned and still passes: a tool input of 200,000 values, commas and brackets in its strings`, async () => {
    if (kind === 'native') bad.queue.push({ response: json(nativeTable()) });
    else badOpenAI.queue.push({ toolCalls: [{ id: 'call_1', name: 'table', input: table }] });
    const hits = good.hits;
    const r = await send(gw, key, msg(model));
    expect(r.status).toBe(200);
    expect(good.hits).toBe(hits);
    expect(r.body.content.find((b: any) => b.type === 'tool_use').input).toEqual(table);
  }, 60_000);
}
