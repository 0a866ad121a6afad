/**
 * The official Anthropic TypeScript SDK against the gateway: what real clients (and Claude Code) do.
 * Its parsers — including MessageStream, which rebuilds a message from the SSE events and fails on a
 * malformed sequence — run over the native pass-through and the OpenAI translation alike.
 */
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, setPrice, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let ant: Scripted;
let oai: Scripted;
let client: Anthropic;

beforeAll(async () => {
  gw = await startGateway();
  ant = upstream('anthropic');
  oai = upstream('openai');
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['claude-native'] });
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['claude-via-openai'], mapping: { 'claude-via-openai': 'gpt-upstream' } });
  for (const m of ['claude-native', 'claude-via-openai']) await setPrice(gw, m);
  const u = await keyedUser(gw, 10_000_000);
  client = new Anthropic({ apiKey: u.key, baseURL: gw.url, maxRetries: 0 });
});
afterAll(async () => {
  await gw.stop();
  await ant.stop();
  await oai.stop();
});

const weather = { name: 'get_weather', description: 'Weather for a city', input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] } };

describe.each(['claude-native', 'claude-via-openai'])('Anthropic SDK via %s', (model) => {
  const up = () => (model === 'claude-native' ? ant : oai);

  test('messages.create: text, usage, and the model the client asked for', async () => {
    up().queue.push({ text: 'Hello from upstream', usage: { input: 12, output: 4 } });
    const m = await client.messages.create({ model, max_tokens: 64, messages: [{ role: 'user', content: 'Hi' }] });
    expect(m.type).toBe('message');
    expect(m.model).toBe(model);
    expect(m.content).toEqual([expect.objectContaining({ type: 'text', text: 'Hello from upstream' })]);
    expect(m.stop_reason).toBe('end_turn');
    expect(m.usage.input_tokens).toBe(12);
    expect(m.usage.output_tokens).toBe(4);
  });

  test('messages.stream: the SDK rebuilds text and usage from the event sequence', async () => {
    up().queue.push({ text: 'Streamed answer, in pieces.', stream: true, usage: { input: 20, output: 7 } });
    const stream = client.messages.stream({ model, max_tokens: 64, messages: [{ role: 'user', content: 'Hi' }] });
    let text = '';
    stream.on('text', (t) => { text += t; });
    const final = await stream.finalMessage();
    expect(text).toBe('Streamed answer, in pieces.');
    expect(final.content).toEqual([expect.objectContaining({ type: 'text', text: 'Streamed answer, in pieces.' })]);
    expect(final.model).toBe(model);
    expect(final.stop_reason).toBe('end_turn');
    expect(final.usage.output_tokens).toBe(7);
    expect(final.usage.input_tokens).toBe(20);
  });

  test('tool use, streamed: parallel tool calls arrive as parsed tool_use blocks', async () => {
    up().queue.push({
      stream: true, stopReason: 'tool_use', usage: { input: 30, output: 15 },
      toolCalls: [{ id: 'toolu_a', name: 'get_weather', input: { city: 'Oslo' } }, { id: 'toolu_b', name: 'get_weather', input: { city: 'Lima' } }],
    });
    const final = await client.messages.stream({ model, max_tokens: 128, tools: [weather], messages: [{ role: 'user', content: 'Weather in Oslo and Lima?' }] }).finalMessage();
    expect(final.stop_reason).toBe('tool_use');
    const calls = final.content.filter((b) => b.type === 'tool_use');
    expect(calls.map((c: any) => [c.name, c.input])).toEqual([['get_weather', { city: 'Oslo' }], ['get_weather', { city: 'Lima' }]]);
  });

  test('errors surface as the SDK error classes with the gateway request id', async () => {
    const bad = new Anthropic({ apiKey: 'sk-not-a-real-key', baseURL: gw.url, maxRetries: 0 });
    const e = await bad.messages.create({ model, max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }).catch((x) => x);
    expect(e).toBeInstanceOf(Anthropic.AuthenticationError);
    expect(e.status).toBe(401);
    expect(e.requestID).toMatch(/^req_/);
    const e2 = await client.messages.create({ model, max_tokens: 8, messages: [{ role: 'tool' as any, content: 'x' }] }).catch((x) => x);
    expect(e2).toBeInstanceOf(Anthropic.BadRequestError);
    expect(e2.error.error.param).toBe('messages[0].role');
  });
});

test('models.list and countTokens through the SDK', async () => {
  const page = await client.models.list();
  expect(page.data.map((m) => m.id).sort()).toEqual(['claude-native', 'claude-via-openai']);
  const n = await client.messages.countTokens({ model: 'claude-via-openai', messages: [{ role: 'user', content: 'How many tokens is this?' }] });
  expect(n.input_tokens).toBeGreaterThan(0);
});

test('beta messages (as Claude Code calls them: ?beta=true and anthropic-beta) pass through to a native channel', async () => {
  ant.queue.push({ text: 'beta ok', stream: true, usage: { input: 5, output: 2 } });
  const final = await client.beta.messages.stream({
    model: 'claude-native', max_tokens: 32, betas: ['interleaved-thinking-2025-05-14'],
    messages: [{ role: 'user', content: 'Hi' }],
  }).finalMessage();
  expect(final.content).toEqual([expect.objectContaining({ type: 'text', text: 'beta ok' })]);
  expect(ant.last().headers['anthropic-beta']).toBe('interleaved-thinking-2025-05-14');
});

/** An OpenAI-compatible stream chunk of one choice, and the usage chunk that ends a stream. */
const chunk = (delta: object, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const usage = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 10, completion_tokens: 5 } })}\n\n`;

// Tool arguments an OpenAI-compatible model got wrong. The SDK parses every input_json_delta as it comes: arguments
// that were no object became an input that is none (`[1,2]`, `null`), and ones that were no JSON (`{'a': 1}`, an
// object with text after it, two calls' arguments run together) made it throw mid-stream, losing the whole answer.
// Streamed, only what continues one JSON object is sent; the same answer as JSON gives the same input.
describe('tool arguments that are not one JSON object (translated)', () => {
  const call = (args: string[]) => [
    chunk({ role: 'assistant', content: null }),
    chunk({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '' } }] }),
    ...args.map((arguments_) => chunk({ tool_calls: [{ index: 0, function: { arguments: arguments_ } }] })),
    chunk({}, 'tool_calls'), usage, 'data: [DONE]\n\n',
  ];
  const cases: Array<[string[], Record<string, unknown>]> = [
    [['[1,', '2]'], {}], [['null'], {}], [['"Oslo"'], {}], [['garbage'], {}], [["{'city': ", "'Oslo'}"], {}],
    [['{"city":"Oslo"}', ' (done)'], { city: 'Oslo' }], [['{"city":"Os', 'lo"}{"city":"Lima"}'], { city: 'Oslo' }],
    [['  ', '{"city":"\\u00c5', 'lesund"}'], { city: 'Ålesund' }],
  ];
  const ask = { model: 'claude-via-openai', max_tokens: 64, tools: [weather], messages: [{ role: 'user' as const, content: 'Weather?' }] };

  test.each(cases)('%j: the streamed input is an object, the same as the JSON answer\'s', async (args, input) => {
    oai.queue.push({ rawFrames: call(args) });
    const streamed = await client.messages.stream(ask).finalMessage();
    oai.queue.push({ rawJson: { id: 'c', object: 'chat.completion', created: 1, model: 'm', usage: { prompt_tokens: 10, completion_tokens: 5 },
      choices: [{ index: 0, finish_reason: 'tool_calls', message: { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: args.join('') } }] } }] } });
    const whole = await client.messages.create(ask);
    for (const m of [streamed, whole]) {
      expect(m.stop_reason).toBe('tool_use');
      expect(m.content).toEqual([expect.objectContaining({ type: 'tool_use', id: 'call_1', name: 'get_weather', input })]);
    }
  });
});

// Arguments cut mid-object (the upstream hit its output limit, or ended the stream): streamed, the SDK got the partial
// JSON deltas and made of them what its partial parser could (`{"city":"Os` one thing, `{"city":"Oslo","da` and
// `{"n":-` another, or threw), while the JSON answer gave `{}`. Both now give the longest prefix that ends a value,
// closed: the streamed deltas add up to that one JSON object.
describe('tool arguments cut mid-object (translated)', () => {
  const cut = (args: string[], finish: string | null) => [
    chunk({ role: 'assistant', content: null }),
    chunk({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '' } }] }),
    ...args.map((arguments_) => chunk({ tool_calls: [{ index: 0, function: { arguments: arguments_ } }] })),
    ...(finish ? [chunk({}, finish), usage] : []), 'data: [DONE]\n\n',
  ];
  const cases: Array<[string[], Record<string, unknown>]> = [
    [['{"city": "Os'], { city: 'Os' }],
    [['{"city":"Oslo",', '"days":', '3'], { city: 'Oslo', days: 3 }],
    [['{"city":"Oslo","da'], { city: 'Oslo' }],
    [['{"city":"Oslo","days":'], { city: 'Oslo' }],
    [['{"city":"Oslo","tags":["a","b'], { city: 'Oslo', tags: ['a', 'b'] }],
    [['{"city":"Oslo","at":{"lat":59.9,', '"lon":1'], { city: 'Oslo', at: { lat: 59.9, lon: 1 } }],
    [['{"city":"O\\'], { city: 'O' }],
    [['{"city":"O\\u00'], { city: 'O' }],
    [['{"n":-'], {}],
    [['{"n":1.'], { n: 1 }],
    [['{"ok":tr'], {}],
    [['{'], {}],
  ];
  const ask = { model: 'claude-via-openai', max_tokens: 64, tools: [weather], messages: [{ role: 'user' as const, content: 'Weather?' }] };

  test.each(cases)('%j: the streamed input and the JSON answer\'s are the same object', async (args, input) => {
    for (const finish of ['length', null]) {
      oai.queue.push({ rawFrames: cut(args, finish) });
      const streamed = await client.messages.stream(ask).finalMessage();
      oai.queue.push({ rawJson: { id: 'c', object: 'chat.completion', created: 1, model: 'm', usage: { prompt_tokens: 10, completion_tokens: 5 },
        choices: [{ index: 0, finish_reason: finish ?? 'length', message: { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: args.join('') } }] } }] } });
      const whole = await client.messages.create(ask);
      for (const m of [streamed, whole]) {
        expect(m.content).toEqual([expect.objectContaining({ type: 'tool_use', id: 'call_1', name: 'get_weather', input })]);
      }
    }
  });
});
