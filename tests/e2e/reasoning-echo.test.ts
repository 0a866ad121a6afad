/**
 * Thinking sent back to translated channels, over real HTTP: an agent loop (Claude Code) returns the thinking block
 * it received with its tool calls. A DeepSeek-like upstream answers 400 to tool calls sent back without their
 * `reasoning_content`; an OpenAI-like one answers 400 to any message field it does not know. The channel's
 * `reasoning_echo` decides which one the gateway is talking to.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { startOpenAIUpstream } from '../doubles/openai-upstream';
import type { UpstreamDouble, UpstreamPlan } from '../doubles/sse';
import { checkMessage, checkStream } from '../conformance/anthropic-wire';
import { keyedUser, send, setPrice } from './relay-setup';

let gw: TestGateway;
let deepseek: UpstreamDouble;
let openai: UpstreamDouble;
let key: string;
const plans: UpstreamPlan[] = [];

async function channel(name: string, url: string, model: string, extra: Record<string, unknown> = {}): Promise<number> {
  const r = await gw.api('POST', '/api/channel/', { name, type: 'openai', base_url: url, key: 'k', models: [model], timeout_ms: 5000, ...extra });
  if (r.status !== 200) throw new Error(`channel: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.data.id;
}

beforeAll(async () => {
  gw = await startGateway();
  deepseek = startOpenAIUpstream({ requireReasoningEcho: true, maxRecorded: 100 });
  openai = startOpenAIUpstream({ strictMessages: true, maxRecorded: 100 });
  for (const d of [deepseek, openai]) d.script(() => plans.shift() ?? { text: 'Done.' });
  await channel('deepseek', deepseek.url, 'ds-r', { reasoning_echo: 'always' });
  await channel('deepseek-never', deepseek.url, 'ds-never', { reasoning_echo: 'never' });
  await channel('openai', openai.url, 'gpt-r'); // auto: not a host known to take reasoning_content
  for (const m of ['ds-r', 'ds-never', 'gpt-r']) await setPrice(gw, m);
  key = (await keyedUser(gw, 10_000_000)).key;
}, 30_000);
afterAll(async () => { await deepseek.stop(); await openai.stop(); await gw.stop(); });

const TOOLS = [{ name: 'get_weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }];
const ASK = { role: 'user', content: 'Weather in Paris?' };
const REASONING = 'The user wants the weather; I should call get_weather for Paris.';

/** One request of the loop; returns the answer's content blocks as the client assembled them. */
async function turn(model: string, messages: unknown[], stream: boolean, plan: UpstreamPlan) {
  plans.push(plan);
  const r = await send(gw, key, { model, max_tokens: 1000, stream, tools: TOOLS, thinking: { type: 'enabled', budget_tokens: 2000 }, messages });
  return { status: r.status, body: r.body, content: r.status === 200 ? (stream ? checkStream(r.text) : checkMessage(r.body)).content : [] };
}

/** The two-turn tool loop an agent runs: the answer's blocks are sent back as they came, with the tool's result. */
async function toolLoop(model: string, stream: boolean) {
  const first = await turn(model, [ASK], stream, { text: '', reasoning: REASONING, toolCalls: [{ id: 'call_w1', name: 'get_weather', input: { city: 'Paris' } }] });
  expect(first.status).toBe(200);
  expect(first.content.map((b: any) => b.type)).toEqual(['thinking', 'tool_use']);
  expect(first.content[0]).toMatchObject({ thinking: REASONING, signature: '' });
  const toolUse = first.content[1];
  const second = await turn(model, [ASK, { role: 'assistant', content: first.content }, {
    role: 'user', content: [{ type: 'tool_result', tool_use_id: toolUse.id, content: '18°C, sunny' }],
  }], stream, { reasoning: 'It is sunny.', text: 'It is 18°C and sunny in Paris.' });
  return second;
}

const sentAssistant = (d: UpstreamDouble) => d.requests.at(-1)!.body.messages.find((m: any) => m.role === 'assistant');

describe('reasoning_echo', () => {
  for (const stream of [false, true]) {
    test(`DeepSeek-like upstream (${stream ? 'stream' : 'JSON'}): the tool loop's second turn carries the first turn's reasoning back`, async () => {
      const second = await toolLoop('ds-r', stream);
      expect(second.status).toBe(200);
      expect(second.content.find((b: any) => b.type === 'text')?.text).toBe('It is 18°C and sunny in Paris.');
      expect(sentAssistant(deepseek)).toMatchObject({ role: 'assistant', content: null, reasoning_content: REASONING, tool_calls: [{ function: { name: 'get_weather' } }] });
    });

    test(`OpenAI-like upstream (${stream ? 'stream' : 'JSON'}, auto): the same loop succeeds and reasoning_content is never sent`, async () => {
      const before = openai.requests.length;
      const second = await toolLoop('gpt-r', stream);
      expect(second.status).toBe(200);
      const sent = openai.requests.slice(before);
      expect(sent.length).toBe(2);
      for (const r of sent) expect(JSON.stringify(r.body)).not.toContain('reasoning_content');
    });
  }

  test('never: nothing is echoed, so the DeepSeek-like upstream refuses the second turn with a 400 (a clear error, not a 5xx)', async () => {
    const second = await toolLoop('ds-never', false);
    expect(second.status).toBe(400);
    expect(second.body.error.message).toContain('reasoning_content');
    expect(sentAssistant(deepseek).reasoning_content).toBeUndefined();
  });

  test("an Anthropic channel's signed thinking and redacted_thinking are not echoed: the tool calls get an empty reasoning_content", async () => {
    const history = [ASK, {
      role: 'assistant', content: [
        { type: 'thinking', thinking: 'Claude private reasoning', signature: 'EqQBCkYIARgCKkD' },
        { type: 'redacted_thinking', data: 'EmwKAhgBEgy3va3pzix/LafPsn4a' },
        { type: 'tool_use', id: 'toolu_01A', name: 'get_weather', input: { city: 'Paris' } },
      ],
    }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01A', content: '18°C' }] }];
    expect((await turn('ds-r', history, false, { text: 'Sunny.' })).status).toBe(200);
    expect(sentAssistant(deepseek).reasoning_content).toBe('');
    expect(JSON.stringify(deepseek.requests.at(-1)!.body)).not.toContain('EmwKAhgB');
    expect(JSON.stringify(deepseek.requests.at(-1)!.body)).not.toContain('Claude private reasoning');
    expect((await turn('gpt-r', history, true, { text: 'Sunny.' })).status).toBe(200);
    expect(sentAssistant(openai)).not.toHaveProperty('reasoning_content');
  });

  test('the channel field: default auto, validated, changed by PUT and applied to the next request', async () => {
    const id = await channel('echo-field', openai.url, 'gpt-field');
    await setPrice(gw, 'gpt-field');
    expect((await gw.api('GET', `/api/channel/${id}`)).body.data.reasoning_echo).toBe('auto');
    const bad = await gw.api('PUT', '/api/channel/', { id, reasoning_echo: 'sometimes' });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toContain('reasoning_echo');
    const put = await gw.api('PUT', '/api/channel/', { id, reasoning_echo: 'always' });
    expect(put.status).toBe(200);
    expect(put.body.data.reasoning_echo).toBe('always');
    // The strict double now refuses: the change reached the relay.
    const r = await toolLoop('gpt-field', false);
    expect(r.status).toBe(400);
    expect(r.body.error.message).toContain("'reasoning_content' was unexpected");
  });
});
