/**
 * A hostile or buggy OpenAI-compatible upstream, over real HTTP through a gateway: whatever it sends (fields of
 * the wrong type, tool names that are Object.prototype keys, choices of another index, a second finish_reason,
 * an unusable cached count, output held without bound behind an unfinished tool call, thousands of tool calls),
 * the client gets a well-formed Anthropic answer or a clear error event, and the charge is exact, once, and
 * never computed from a count the upstream spoiled.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { SseParser } from '@gw/formats';
import { addChannel, keyedUser, send, setPrice, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let oai: Scripted;
beforeAll(async () => {
  gw = await startGateway();
  oai = upstream('openai');
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['gpt-h'] });
  // 1 unit per input token, 2 per output token, cache reads 0.1.
  await setPrice(gw, 'gpt-h', { cache_read: 100_000 });
}, 30_000);
afterAll(async () => { await oai.stop(); await gw.stop(); });

const chunk = (delta: unknown, finish: unknown = null, extra: object = {}) =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }], ...extra })}\n\n`;
const usageChunk = (u: unknown) => `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [], usage: u })}\n\n`;
const DONE = 'data: [DONE]\n\n';
const U = { prompt_tokens: 10, completion_tokens: 5 };
const completion = (message: unknown, usage: unknown = U, choices?: unknown[]) =>
  ({ id: 'c', object: 'chat.completion', created: 1, model: 'm', choices: choices ?? [{ index: 0, message, finish_reason: 'stop' }], usage });
const TOOLS = [{ name: 'get', input_schema: { type: 'object' } }];

/** Sends one request answered by `plan`; returns the response and its usage row, checking the ledger holds exactly that charge. */
async function run(plan: { rawFrames?: string[]; rawJson?: unknown; cutAfter?: number }, extra: Record<string, unknown> = {}) {
  const u = await keyedUser(gw, 1_000_000);
  oai.queue.push(plan);
  const r = await send(gw, u.key, { model: 'gpt-h', max_tokens: 100, stream: !!plan.rawFrames, tools: TOOLS, messages: [{ role: 'user', content: 'Hi' }], ...extra });
  gw.services.relay.quota.flush();
  const rows = await gw.db.all('select input_tokens, output_tokens, cache_read_tokens, cost, usage_flag, error_code from usage_logs where request_id = ?', r.headers.get('request-id'));
  expect(rows.length).toBe(1);
  const row = rows[0];
  expect(Number.isSafeInteger(row.cost) && row.cost >= 0).toBe(true);
  expect(await gw.services.ledger.sum(u.id)).toBe(1_000_000 - row.cost);
  return { r, row };
}

type Ev = { type: string; [k: string]: any };
/**
 * Parses an Anthropic stream and checks it is well formed: every frame's event name is its type, blocks open,
 * get deltas of their kind with string payloads, and close in order, and it ends with message_stop or error.
 */
function wellFormed(text: string): Ev[] {
  const events = new SseParser().push(text).map((e) => {
    const ev = JSON.parse(e.data) as Ev;
    expect(e.event).toBe(ev.type);
    return ev;
  });
  const open = new Map<number, string>();
  let next = 0;
  for (const ev of events) {
    if (ev.type === 'content_block_start') {
      expect(ev.index).toBe(next++);
      const b = ev.content_block;
      open.set(ev.index, b.type);
      if (b.type === 'text') expect(typeof b.text).toBe('string');
      if (b.type === 'thinking') expect(typeof b.thinking).toBe('string');
      if (b.type === 'tool_use') {
        expect(b.id).toMatch(/^[A-Za-z0-9_-]+$/);
        expect(typeof b.name).toBe('string');
      }
    } else if (ev.type === 'content_block_delta') {
      const kind = open.get(ev.index);
      const d = ev.delta;
      const field = { text: 'text', thinking: 'thinking', tool_use: 'partial_json' }[kind!];
      const key = { text_delta: 'text', thinking_delta: 'thinking', input_json_delta: 'partial_json' }[d.type as string];
      expect(key).toBe(field);
      expect(typeof d[key!]).toBe('string');
    } else if (ev.type === 'content_block_stop') {
      expect(open.delete(ev.index)).toBe(true);
    } else if (ev.type === 'message_delta') {
      expect(open.size).toBe(0);
      for (const k of ['input_tokens', 'output_tokens'] as const) expect(Number.isSafeInteger(ev.usage[k]) && ev.usage[k] >= 0).toBe(true);
    }
  }
  expect(['message_stop', 'error']).toContain(events.at(-1)!.type);
  return events;
}
const blocks = (events: Ev[]) => events.filter((e) => e.type === 'content_block_start').map((e) => e.content_block);
const textOf = (events: Ev[]) => events.filter((e) => e.delta?.type === 'text_delta').map((e) => e.delta.text).join('');

describe('fields of the wrong type', () => {
  test('stream: content, reasoning and refusal that are not strings are no text; a well-formed answer billed from usage, not an error', async () => {
    const { r, row } = await run({ rawFrames: [
      chunk({ content: 5 }), chunk({ content: { a: 1 } }), chunk({ reasoning_content: { a: 1 } }), chunk({ refusal: 7 }),
      chunk({ content: 'ok' }), chunk({ content: [{ type: 'text', text: ' parts' }] }), chunk({}, 'stop'), usageChunk(U), DONE,
    ] });
    const events = wellFormed(r.text);
    expect(events.at(-1)!.type).toBe('message_stop');
    expect(textOf(events)).toBe('ok parts');
    expect(events.find((e) => e.type === 'message_delta')!.delta.stop_reason).toBe('end_turn');
    expect(row).toMatchObject({ input_tokens: 10, output_tokens: 5, cost: 20, usage_flag: '', error_code: '' });
  });

  test('stream: tool calls that are not an array, not objects, or with an id, name or arguments of the wrong type', async () => {
    const { r, row } = await run({ rawFrames: [
      chunk({ tool_calls: { index: 0 } }), chunk({ tool_calls: [null, 5] }), chunk({ tool_calls: 'abc' }),
      chunk({ tool_calls: [{ index: 0, id: 5, function: { name: { a: 1 }, arguments: 7 } }] }),
      chunk({ tool_calls: [{ index: 0, function: { name: 'get', arguments: '{"a":1}' } }] }),
      chunk({}, 'tool_calls'), usageChunk(U), DONE,
    ] });
    const events = wellFormed(r.text);
    expect(events.at(-1)!.type).toBe('message_stop');
    expect(blocks(events)).toEqual([{ type: 'tool_use', id: expect.stringMatching(/^toolu_.+_0$/), name: 'get', input: {} }]);
    expect(row).toMatchObject({ input_tokens: 10, output_tokens: 5, cost: 20, error_code: '' });
  });

  test('stream: tool-call indexes that are negative, fractional, huge or not numbers give ids of the Anthropic alphabet', async () => {
    const calls = [-1, 1.5, 1e308, 'a\r\nb', { o: 1 }].map((index) => ({ index, function: { name: 'get', arguments: '{}' } }));
    const { r } = await run({ rawFrames: [chunk({ tool_calls: calls }), chunk({}, 'tool_calls'), usageChunk(U), DONE] });
    const tools = blocks(wellFormed(r.text));
    expect(tools.length).toBe(5);
    expect(new Set(tools.map((b) => b.id)).size).toBe(5);
  });

  test('JSON: content as a number, text parts, reasoning and refusal of the wrong type, tool ids and names of the wrong type or missing', async () => {
    const { r: num } = await run({ rawJson: completion({ role: 'assistant', content: 5, reasoning_content: { a: 1 }, refusal: 7 }) });
    expect(num.status).toBe(200);
    expect(num.body.content).toEqual([]);
    expect(num.body.stop_reason).toBe('end_turn');
    const { r: parts } = await run({ rawJson: completion({ role: 'assistant', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }, 3] }) });
    expect(parts.body.content).toEqual([{ type: 'text', text: 'ab' }]);
    const { r: tools, row } = await run({ rawJson: completion({ role: 'assistant', content: null, tool_calls: [
      { id: 5, type: 'function', function: { name: 5, arguments: { a: 1 } } },
      { type: 'function', function: { name: 'get', arguments: '{"a":1}' } },
      null, { id: 'c3' }, 'x',
    ] }) });
    expect(tools.status).toBe(200);
    const id = tools.body.id.replace(/^msg_/, '');
    expect(tools.body.content).toEqual([
      { type: 'tool_use', id: `toolu_${id}_0`, name: '', input: { a: 1 } }, // arguments as an object: see below
      { type: 'tool_use', id: `toolu_${id}_1`, name: 'get', input: { a: 1 } },
      { type: 'tool_use', id: 'c3', name: '', input: {} },
    ]);
    expect(tools.body.stop_reason).toBe('tool_use');
    expect(row).toMatchObject({ input_tokens: 10, output_tokens: 5, cost: 20 });
  });
});

describe('tool arguments sent as a JSON object instead of a string (the llama.cpp server with --tool-args-object, and others)', () => {
  const args = { city: 'Paris', days: [1, 2] };
  test('stream: the object is the call\'s input, not {}', async () => {
    const { r } = await run({ rawFrames: [chunk({ tool_calls: [{ index: 0, id: 'call_o', type: 'function', function: { name: 'get', arguments: args } }] }), chunk({}, 'tool_calls'), usageChunk(U), DONE] });
    const events = wellFormed(r.text);
    expect(blocks(events)).toEqual([{ type: 'tool_use', id: 'call_o', name: 'get', input: {} }]);
    expect(JSON.parse(events.filter((e) => e.delta?.type === 'input_json_delta').map((e) => e.delta.partial_json).join(''))).toEqual(args);
  });
  test('JSON: the same; an array or a number is still no input', async () => {
    const calls = [args, [1], 5].map((a, i) => ({ id: `call_${i}`, type: 'function', function: { name: 'get', arguments: a } }));
    const { r } = await run({ rawJson: completion({ role: 'assistant', content: null, tool_calls: calls }) });
    expect(r.body.content.map((b: Ev) => b.input)).toEqual([args, {}, {}]);
  });
});

describe('tool calls without an index (as Gemini\'s compatible API streams them)', () => {
  test('each whole unindexed call is its own tool_use block with its own arguments', async () => {
    const call = (id: string, args: string) => chunk({ tool_calls: [{ id, type: 'function', function: { name: 'get', arguments: args } }] });
    const { r } = await run({ rawFrames: [call('call_a', '{"city":"Paris"}'), call('call_b', '{"city":"Rome"}'), chunk({}, 'tool_calls'), usageChunk(U), DONE] });
    const events = wellFormed(r.text);
    expect(blocks(events).map((b) => b.id)).toEqual(['call_a', 'call_b']);
    const args = (i: number) => events.filter((e) => e.type === 'content_block_delta' && e.index === i).map((e) => e.delta.partial_json).join('');
    expect([JSON.parse(args(0)), JSON.parse(args(1))]).toEqual([{ city: 'Paris' }, { city: 'Rome' }]);
  });
});

describe('parallel tool calls that share an index (Ollama, and LiteLLM relaying it, number every call 0)', () => {
  const args = (events: Ev[], i: number) => events.filter((e) => e.type === 'content_block_delta' && e.index === i).map((e) => e.delta.partial_json).join('');
  test('stream: a delta bringing another id and a name starts a new call; fragments without an id stay with the current one', async () => {
    const { r } = await run({ rawFrames: [
      chunk({ tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'get', arguments: '{"a":' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '1}' } }] }),
      chunk({ tool_calls: [{ index: 0, id: 'call_b', type: 'function', function: { name: 'get', arguments: '{"b":' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '2}' } }] }),
      // The same id again (servers repeating it on every fragment) is the same call.
      chunk({ tool_calls: [{ index: 0, id: 'call_b', function: { arguments: '' } }] }),
      chunk({}, 'tool_calls'), usageChunk(U), DONE,
    ] });
    const events = wellFormed(r.text);
    expect(blocks(events).map((b) => [b.id, b.name])).toEqual([['call_a', 'get'], ['call_b', 'get']]);
    expect([JSON.parse(args(events, 0)), JSON.parse(args(events, 1))]).toEqual([{ a: 1 }, { b: 2 }]);
    expect(events.find((e) => e.type === 'message_delta')!.delta.stop_reason).toBe('tool_use');
  });
});

describe('tool-call ids Anthropic would refuse', () => {
  // Kimi's compatible API names calls `functions.get:0`; some servers give every call the same id. Anthropic's
  // tool_use ids are ^[a-zA-Z0-9_-]+$ and unique: a client replaying such a history to an Anthropic channel got a
  // 400, and two tool_results with one id cannot be told apart.
  const ok = (ids: string[]) => {
    for (const id of ids) expect(id).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(new Set(ids).size).toBe(ids.length);
  };
  test('JSON: an id outside the alphabet, or repeated, is replaced by a derived one; a good id is kept', async () => {
    const call = (id: string) => ({ id, type: 'function', function: { name: 'get', arguments: '{}' } });
    const { r } = await run({ rawJson: completion({ role: 'assistant', content: null, tool_calls: [call('functions.get:0'), call('call_ok'), call('call_ok'), call('functions.get:0')] }) });
    const ids = r.body.content.map((b: any) => b.id);
    ok(ids);
    expect(ids[1]).toBe('call_ok');
  });
  test('stream: the same', async () => {
    const calls = ['functions.get:0', 'call_ok', 'call_ok'].map((id, index) => chunk({ tool_calls: [{ index, id, function: { name: 'get', arguments: '{}' } }] }));
    const { r } = await run({ rawFrames: [...calls, chunk({}, 'tool_calls'), usageChunk(U), DONE] });
    const ids = blocks(wellFormed(r.text)).map((b) => b.id);
    expect(ids.length).toBe(3);
    ok(ids);
    expect(ids[1]).toBe('call_ok');
  });
});

describe('tool names that are Object.prototype keys', () => {
  // The name map is a plain object: toolNames["constructor"] is Object, which serialised to no name at all.
  const names = ['constructor', 'toString', '__proto__', 'hasOwnProperty'];
  const tools = names.map((name) => ({ name, input_schema: { type: 'object' } }));
  test('stream: each keeps its name', async () => {
    const calls = names.map((name, index) => chunk({ tool_calls: [{ index, id: `call_${index}`, function: { name, arguments: '{}' } }] }));
    const { r } = await run({ rawFrames: [...calls, chunk({}, 'tool_calls'), usageChunk(U), DONE] }, { tools });
    expect(blocks(wellFormed(r.text)).map((b) => b.name)).toEqual(names);
    // The request side too: each tool reaches the upstream under its own name (it was Object, dropped by JSON).
    expect(oai.last().body.tools.map((t: any) => t.function.name)).toEqual(names);
  });
  test('JSON: each keeps its name', async () => {
    const tool_calls = names.map((name, i) => ({ id: `call_${i}`, type: 'function', function: { name, arguments: '{}' } }));
    const { r } = await run({ rawJson: completion({ role: 'assistant', content: null, tool_calls }) }, { tools });
    expect(r.status).toBe(200);
    expect(r.body.content.map((b: any) => b.name)).toEqual(names);
  });
});

describe('choices and finish reasons', () => {
  test('stream: a choice of another index is not merged into the answer; a lone choice of any index is read', async () => {
    const of = (index: unknown, content: string, finish: string | null = null) => `data: ${JSON.stringify({ id: 'c', choices: [{ index, delta: { content }, finish_reason: finish }] })}\n\n`;
    const { r } = await run({ rawFrames: [chunk({ content: 'zero' }), of(1, 'OTHER'), `data: ${JSON.stringify({ choices: [{ index: 1, delta: { content: 'X' } }, { index: 0, delta: { content: '!' } }] })}\n\n`, of(1, 'Y', 'length'), chunk({}, 'stop'), usageChunk(U), DONE] });
    const events = wellFormed(r.text);
    expect(textOf(events)).toBe('zero!');
    expect(events.find((e) => e.type === 'message_delta')!.delta.stop_reason).toBe('end_turn');
    // A quirky server numbering its only choice otherwise is still read.
    const { r: lone } = await run({ rawFrames: [of(3, 'three'), of(3, '', 'stop'), usageChunk(U), DONE] });
    expect(textOf(wellFormed(lone.text))).toBe('three');
  });
  test('JSON: the choice of index 0 is the answer, wherever it is in the list', async () => {
    const { r } = await run({ rawJson: completion(null, U, [
      { index: 3, message: { role: 'assistant', content: 'three' }, finish_reason: 'stop' },
      { index: 0, message: { role: 'assistant', content: 'zero' }, finish_reason: 'stop' },
    ]) });
    expect(r.body.content).toEqual([{ type: 'text', text: 'zero' }]);
  });
  test('finish_reason tool_calls (or function_call) without any tool call is end_turn, as Anthropic never says tool_use with no tool_use block', async () => {
    const { r } = await run({ rawJson: completion(null, U, [{ index: 0, message: { role: 'assistant', content: 'done' }, finish_reason: 'tool_calls' }]) });
    expect(r.body).toMatchObject({ content: [{ type: 'text', text: 'done' }], stop_reason: 'end_turn' });
    const { r: s } = await run({ rawFrames: [chunk({ content: 'done' }), chunk({}, 'function_call'), usageChunk(U), DONE] });
    expect(wellFormed(s.text).find((e) => e.type === 'message_delta')!.delta.stop_reason).toBe('end_turn');
  });
  test('stream without usage: fragments for a call already closed are dropped, and not billed as delivered output', async () => {
    const call = (args: string, extra: object = {}) => chunk({ tool_calls: [{ index: 0, function: { arguments: args }, ...extra }] });
    const { r, row } = await run({ rawFrames: [call('{"q":1}', { id: 'call_a', type: 'function', function: { name: 'get', arguments: '{"q":1}' } }),
      chunk({}, 'tool_calls'), call(`"${'x'.repeat(40_000)}"`), DONE] });
    const events = wellFormed(r.text);
    expect(blocks(events)).toEqual([{ type: 'tool_use', id: 'call_a', name: 'get', input: {} }]);
    expect(events.filter((e) => e.delta?.type === 'input_json_delta').map((e) => e.delta.partial_json).join('')).toBe('{"q":1}');
    const shown = events.find((e) => e.type === 'message_delta')!.usage.output_tokens;
    expect(shown).toBeLessThan(10);
    expect(row).toMatchObject({ output_tokens: shown, usage_flag: 'estimated' });
  });
  test('stream: a second finish_reason does not turn a cut answer (length) into a whole one', async () => {
    const { r } = await run({ rawFrames: [chunk({ content: 'hi' }, 'length'), chunk({}, 'stop'), usageChunk(U), DONE] });
    expect(wellFormed(r.text).find((e) => e.type === 'message_delta')!.delta.stop_reason).toBe('max_tokens');
  });
});

describe('usage', () => {
  const bad = { prompt_tokens: 1000, completion_tokens: 5, prompt_tokens_details: { cached_tokens: -3 } };
  test('an unusable cached count leaves a valid prompt_tokens billed in full as uncached input (stream and JSON), flagged invalid', async () => {
    for (const plan of [{ rawFrames: [chunk({ content: 'hi' }, 'stop'), usageChunk(bad), DONE] }, { rawJson: completion({ role: 'assistant', content: 'hi' }, bad) }]) {
      const { r, row } = await run(plan);
      if (plan.rawFrames) wellFormed(r.text);
      expect(row).toMatchObject({ input_tokens: 1000, output_tokens: 5, cache_read_tokens: 0, cost: 1010, usage_flag: 'invalid' });
    }
  });
  test('a cached count above prompt_tokens is no reading of the prompt: billed in full as uncached input (stream and JSON), flagged invalid', async () => {
    // Clamped to the prompt, the whole prompt was billed as cache reads, the cheapest reading of a report that cannot be true.
    for (const u of [{ prompt_tokens: 1000, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 5000 } },
      { prompt_tokens: 1000, completion_tokens: 5, prompt_cache_hit_tokens: 1001 }]) {
      for (const plan of [{ rawFrames: [chunk({ content: 'hi' }, 'stop'), usageChunk(u), DONE] }, { rawJson: completion({ role: 'assistant', content: 'hi' }, u) }]) {
        const { r, row } = await run(plan);
        if (plan.rawFrames) wellFormed(r.text);
        expect(row).toMatchObject({ input_tokens: 1000, output_tokens: 5, cache_read_tokens: 0, cost: 1010, usage_flag: 'invalid' });
      }
    }
  });
  test('DeepSeek\'s cache hits (prompt_cache_hit_tokens, no prompt_tokens_details) are cache reads, not full-price input (stream and JSON)', async () => {
    const ds = { prompt_tokens: 1000, completion_tokens: 5, prompt_cache_hit_tokens: 800, prompt_cache_miss_tokens: 200 };
    for (const plan of [{ rawFrames: [chunk({ content: 'hi' }, 'stop'), usageChunk(ds), DONE] }, { rawJson: completion({ role: 'assistant', content: 'hi' }, ds) }]) {
      const { r, row } = await run(plan);
      const usage = plan.rawFrames ? wellFormed(r.text).find((e) => e.type === 'message_delta')!.usage : r.body.usage;
      expect(usage).toMatchObject({ input_tokens: 200, output_tokens: 5, cache_read_input_tokens: 800 });
      // 200 input at 1, 800 cache reads at 0.1, 5 output at 2.
      expect(row).toMatchObject({ input_tokens: 200, output_tokens: 5, cache_read_tokens: 800, cost: 290, usage_flag: '' });
    }
  });
  test('stream: usage sent in the error chunk that ends the stream is billed, not the delivered estimate', async () => {
    const u = { prompt_tokens: 5000, completion_tokens: 80 };
    const err = { message: 'Provider disconnected', code: 502 };
    // The last shape: Moonshot's, its usage inside the choice.
    for (const last of [{ error: err, usage: u }, { error: err, choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }], usage: u },
      { error: err, choices: [{ index: 0, delta: {}, finish_reason: 'error', usage: u }] }]) {
      const { r, row } = await run({ rawFrames: [chunk({ content: 'hello world' }), `data: ${JSON.stringify(last)}\n\n`] });
      expect(wellFormed(r.text).at(-1)!.type).toBe('error');
      expect(row).toMatchObject({ input_tokens: 5000, output_tokens: 80, cost: 5160, usage_flag: '', error_code: 'upstream_stream_cut' });
    }
  });
  test('stream: an error chunk after the finish_reason does not turn the whole answer into an error (the client would pay for it and retry)', async () => {
    const err = `data: ${JSON.stringify({ error: { message: 'late failure', type: 'api_error' } })}\n\n`;
    for (const [frames, billed] of [
      [[chunk({ content: 'abc' }, 'stop'), usageChunk({ prompt_tokens: 100, completion_tokens: 50 }), err, DONE], { input_tokens: 100, output_tokens: 50, cost: 200, usage_flag: '' }],
      [[chunk({ content: 'abc' }, 'stop'), err, usageChunk({ prompt_tokens: 100, completion_tokens: 50 })], { input_tokens: 100, output_tokens: 50, cost: 200, usage_flag: '' }],
    ] as const) {
      const { r, row } = await run({ rawFrames: [...frames] });
      const events = wellFormed(r.text);
      expect(events.at(-1)!.type).toBe('message_stop');
      expect(textOf(events)).toBe('abc');
      expect(events.find((e) => e.type === 'message_delta')!.delta.stop_reason).toBe('end_turn');
      expect(row).toMatchObject({ ...billed, error_code: '' });
    }
  });
  test('Moonshot\'s usage: streamed inside the choice (choices[0].usage), cache hits as a top-level cached_tokens', async () => {
    const kimi = { prompt_tokens: 1336, completion_tokens: 31, total_tokens: 1367, cached_tokens: 1280 };
    for (const plan of [
      { rawFrames: [chunk({ content: 'hi' }), `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: {}, finish_reason: 'stop', usage: kimi }] })}\n\n`, DONE] },
      { rawJson: completion({ role: 'assistant', content: 'hi' }, kimi) },
    ]) {
      const { r, row } = await run(plan, { max_tokens: 1000 });
      const usage = plan.rawFrames ? wellFormed(r.text).find((e) => e.type === 'message_delta')!.usage : r.body.usage;
      expect(usage).toMatchObject({ input_tokens: 56, output_tokens: 31, cache_read_input_tokens: 1280 });
      // 56 input at 1, 1280 cache reads at 0.1, 31 output at 2.
      expect(row).toMatchObject({ input_tokens: 56, output_tokens: 31, cache_read_tokens: 1280, cost: 246, usage_flag: '' });
    }
  });
  test('stream: a later usage chunk without counts does not erase an earlier report', async () => {
    const { row } = await run({ rawFrames: [chunk({ content: 'hi' }, 'stop'), usageChunk({ prompt_tokens: 40, completion_tokens: 7 }), usageChunk({}), DONE] });
    expect(row).toMatchObject({ input_tokens: 40, output_tokens: 7, cost: 54, usage_flag: '' });
  });
  // An upstream reporting usage early (in its first chunk, or a usage chunk of its own) and then going on: the count
  // cannot cover what came after it, which was delivered for free (10,000 characters billed as 1 output token).
  test('stream: output delivered after an early completion_tokens is billed on top of it, and shown to the client', async () => {
    const TEXT = 'word '.repeat(2000);
    const body = [chunk({ content: TEXT.slice(0, 5000) }), chunk({ content: TEXT.slice(5000) }), chunk({}, 'stop')];
    const none = await run({ rawFrames: [chunk({ content: '' }), ...body, DONE] }, { max_tokens: 5000 });
    const after = none.row.output_tokens;
    expect(after).toBeGreaterThan(2000);
    const early = { prompt_tokens: 40, completion_tokens: 1 };
    for (const frames of [[chunk({ content: '' }, null, { usage: early }), ...body, DONE], [usageChunk(early), ...body, DONE]]) {
      const { r, row } = await run({ rawFrames: frames }, { max_tokens: 5000 });
      expect(wellFormed(r.text).find((e) => e.type === 'message_delta')!.usage).toMatchObject({ input_tokens: 40, output_tokens: 1 + after });
      expect(row).toMatchObject({ input_tokens: 40, output_tokens: 1 + after, cost: 40 + 2 * (1 + after), usage_flag: '' });
    }
    // Running totals (usage in every chunk, counting that chunk's content) are the count as they are: nothing added.
    const { row } = await run({ rawFrames: [chunk({ content: 'Hello' }, null, { usage: { prompt_tokens: 40, completion_tokens: 2 } }),
      chunk({ content: ' world' }, null, { usage: { prompt_tokens: 40, completion_tokens: 4 } }), chunk({}, 'stop', { usage: { prompt_tokens: 40, completion_tokens: 4 } }), DONE] });
    expect(row).toMatchObject({ input_tokens: 40, output_tokens: 4, cost: 48, usage_flag: '' });
  });
});

describe('a 200 whose JSON body is an error (servers and proxies that answer errors with 200)', () => {
  let second: Scripted;
  beforeAll(async () => {
    second = upstream('openai', { text: 'from the second channel' });
    await addChannel(gw, { type: 'openai', url: oai.url, models: ['gpt-e'], priority: 10 });
    await addChannel(gw, { type: 'openai', url: second.url, models: ['gpt-e'], priority: 1 });
    await setPrice(gw, 'gpt-e');
  });
  afterAll(() => second.stop());
  const ask = async (rawJson: unknown) => {
    const u = await keyedUser(gw, 1_000_000);
    oai.queue.push({ rawJson });
    const before = second.hits;
    const r = await send(gw, u.key, { model: 'gpt-e', max_tokens: 100, messages: [{ role: 'user', content: 'Hi' }] });
    gw.services.relay.quota.flush();
    return { r, secondHits: second.hits - before, balance: await gw.services.ledger.sum(u.id) };
  };
  test('is judged as the status its type stands for: the client\'s 400 stays a 400 (prompt_too_long), not a 502 failed over to every channel', async () => {
    const { r, secondHits, balance } = await ask({ error: { message: "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.", type: 'invalid_request_error', param: 'messages', code: 'context_length_exceeded' } });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('prompt_too_long');
    expect(secondHits).toBe(0);
    expect(balance).toBe(1_000_000);
  });
  test('a body that also carries an answer (choices) is the answer, not an error: served and billed once, no failover', async () => {
    const { r, secondHits, balance } = await ask({ ...completion({ role: 'assistant', content: 'the answer' }), error: { message: 'stale', type: 'rate_limit_error' } });
    expect(r.status).toBe(200);
    expect(r.body.content[0].text).toBe('the answer');
    expect(secondHits).toBe(0);
    expect(balance).toBeLessThan(1_000_000);
  });
  test('an answer whose choice finishes with "error" is a failed answer: fails over, billed only for the answer given', async () => {
    const { r, secondHits, balance } = await ask(completion(null, { prompt_tokens: 5000, completion_tokens: 80 }, [{ index: 0, message: { role: 'assistant', content: 'half an ans' }, finish_reason: 'error' }]));
    expect(r.status).toBe(200);
    expect(r.body.content[0].text).toBe('from the second channel');
    expect(secondHits).toBe(1);
    const [row] = await gw.db.all('select input_tokens, cost from usage_logs where request_id = ?', r.headers.get('request-id'));
    expect(row.input_tokens).toBeLessThan(100);
    expect(balance).toBe(1_000_000 - row.cost);
  });
  test('a rate limit fails over to the next channel, nothing billed for the refused attempt', async () => {
    const { r, secondHits } = await ask({ error: { message: 'Rate limit reached', type: 'rate_limit_error', code: 429 } });
    expect(r.status).toBe(200);
    expect(r.body.content[0].text).toBe('from the second channel');
    expect(secondHits).toBe(1);
  });
});

describe('bounded memory', () => {
  test('a stream cut while text waits behind an unfinished tool call bills only what was delivered', async () => {
    const frames = [
      chunk({ tool_calls: [{ index: 0, id: 'call_a', function: { name: 'get', arguments: '{"a":' } }] }),
      chunk({ tool_calls: [{ index: 1, id: 'call_b', function: { name: 'get', arguments: '{"b":"' + 'y'.repeat(4000) + '"}' } }] }),
      chunk({ content: 'z'.repeat(4000) }),
    ];
    const { r, row } = await run({ rawFrames: frames, cutAfter: 3 });
    expect(wellFormed(r.text).at(-1)!.type).toBe('error');
    expect(row).toMatchObject({ usage_flag: 'estimated' });
    expect(row.output_tokens).toBeLessThan(10);
  });

  test('text held behind an unfinished tool call past 8 Mi characters ends the stream with an error event, upstream cancelled, billed once', async () => {
    const piece = 'x'.repeat(256 * 1024);
    const before = oai.double.cancelled;
    const frames = [
      chunk({ tool_calls: [{ index: 0, id: 'call_a', function: { name: 'get', arguments: '{"a":' } }] }),
      chunk({ tool_calls: [{ index: 1, id: 'call_b', function: { name: 'get', arguments: '{}' } }] }),
      // 64 MiB announced; the gateway must stop after about 8.
      ...Array.from({ length: 256 }, () => chunk({ content: piece })),
      chunk({}, 'tool_calls'), usageChunk(U), DONE,
    ];
    const { r, row } = await run({ rawFrames: frames });
    const events = wellFormed(r.text);
    expect(events.at(-1)).toEqual({ type: 'error', error: { type: 'api_error', message: expect.stringContaining('unfinished tool call') } });
    expect(r.text.length).toBeLessThan(1 << 20); // the held text was never sent
    expect(row.error_code).not.toBe('');
    // Billed for what was delivered (the input and the first call's opening), not for the held text (which,
    // estimated, went past max_tokens and billed all of it).
    expect(row.output_tokens).toBeLessThan(10);
    expect(row.usage_flag).toBe('estimated');
    expect(row.cost).toBe(row.input_tokens + 2 * row.output_tokens);
    for (let i = 0; i < 50 && oai.double.cancelled === before; i++) await Bun.sleep(20);
    expect(oai.double.cancelled).toBe(before + 1);
  }, 30_000);

  test('JSON: 10,000 tool calls are translated; more is an invalid answer (502, nothing billed), not a many-fold larger one', async () => {
    const calls = (n: number) => Array.from({ length: n }, () => ({ function: {} }));
    const { r: ok, row } = await run({ rawJson: completion({ role: 'assistant', content: null, tool_calls: calls(10_000) }) });
    expect(ok.status).toBe(200);
    expect(ok.body.content.length).toBe(10_000);
    expect(row.cost).toBe(20);
    const { r: over, row: overRow } = await run({ rawJson: completion({ role: 'assistant', content: null, tool_calls: calls(10_001) }) });
    expect(over.status).toBe(502);
    expect(over.body.error).toMatchObject({ type: 'api_error', code: 'upstream_bad_response' });
    expect(overRow.cost).toBe(0);
  }, 30_000);

  test('thousands of distinct tool calls: 3,000 relayed whole; past 10,000 an error event', async () => {
    const calls = (n: number) => Array.from({ length: n / 500 }, (_, k) =>
      chunk({ tool_calls: Array.from({ length: 500 }, (_, j) => ({ index: k * 500 + j, id: `c${k * 500 + j}`, function: { name: 'get', arguments: '{}' } })) }));
    const t0 = performance.now();
    const { r: ok } = await run({ rawFrames: [...calls(3000), chunk({}, 'tool_calls'), usageChunk(U), DONE] });
    const okEvents = wellFormed(ok.text);
    expect(okEvents.at(-1)!.type).toBe('message_stop');
    expect(blocks(okEvents).length).toBe(3000);
    expect(performance.now() - t0).toBeLessThan(5000);
    const { r: over } = await run({ rawFrames: [...calls(10_500), chunk({}, 'tool_calls'), usageChunk(U), DONE] });
    const overEvents = wellFormed(over.text);
    expect(overEvents.at(-1)).toEqual({ type: 'error', error: { type: 'api_error', message: expect.stringContaining('more tool calls') } });
  }, 30_000);
});
