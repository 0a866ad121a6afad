/**
 * Client conformance: the request shapes real clients send (tests/fixtures/clients/*.json: Claude Code
 * 2.x, the Anthropic TypeScript SDK, the Vercel AI SDK's Anthropic provider, LangChain) replayed over
 * real HTTP against a native anthropic channel, a translated openai channel and an openai-legacy channel.
 * For each: (a) 200 and a well-formed Anthropic answer or stream, (b) what the recording upstream double
 * received (fields mapped, OpenAI limits respected), (c) the request billed in the usage log.
 */
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { startAnthropicUpstream } from '../doubles/anthropic-upstream';
import { startOpenAIUpstream } from '../doubles/openai-upstream';
import type { RecordedRequest, UpstreamDouble, UpstreamPlan } from '../doubles/sse';
import { keyedUser, setPrice } from '../e2e/relay-setup';
import { checkMessage, checkStream, type Received } from './anthropic-wire';

interface ClientFixture {
  name: string;
  client: string;
  description: string;
  headers: Record<string, string>;
  body: Record<string, any>;
  plan?: { reasoning?: string; callLastTool?: boolean };
}

const DIR = join(import.meta.dir, '../fixtures/clients');
const FIXTURES: ClientFixture[] = readdirSync(DIR).filter((f) => f.endsWith('.json')).sort().map((f) => JSON.parse(readFileSync(join(DIR, f), 'utf8')));

const CHANNELS = {
  anthropic: { model: 'team-claude', upstream: 'claude-sonnet-4-5-20250929' },
  openai: { model: 'team-gpt', upstream: 'gpt-5-upstream' },
  'openai-legacy': { model: 'team-local', upstream: 'qwen3-local' },
} as const;
type Kind = keyof typeof CHANNELS;
const FUNCTION_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

let gw: TestGateway;
let user: Awaited<ReturnType<typeof keyedUser>>;
const doubles = {} as Record<Kind, UpstreamDouble>;
let current: ClientFixture | null = null;

/** The double's answer for the current fixture: call the request's last tool (by the name it was sent), reason first. */
function planFor(kind: Kind, req: RecordedRequest): UpstreamPlan {
  const p = current?.plan ?? {};
  const plan: UpstreamPlan = {};
  if (p.reasoning && kind !== 'anthropic') plan.reasoning = p.reasoning;
  const tools = req.body?.tools as any[] | undefined;
  if (p.callLastTool && tools?.length) {
    const last = tools.at(-1);
    plan.toolCalls = [{ id: kind === 'anthropic' ? 'toolu_conf_1' : 'call_conf_1', name: kind === 'anthropic' ? last.name : last.function.name, input: { q: 'x' } }];
    plan.text = 'Calling a tool.';
  }
  return plan;
}

beforeAll(async () => {
  gw = await startGateway();
  for (const kind of Object.keys(CHANNELS) as Kind[]) {
    const d = kind === 'anthropic' ? startAnthropicUpstream() : startOpenAIUpstream();
    d.script((req) => planFor(kind, req));
    doubles[kind] = d;
    const c = CHANNELS[kind];
    const r = await gw.api('POST', '/api/channel/', { name: `conf-${kind}`, type: kind, base_url: d.url, key: 'upstream-key', models: [c.model], model_mapping: { [c.model]: c.upstream }, timeout_ms: 5000 });
    expect(r.status).toBe(200);
    await setPrice(gw, c.model);
  }
  user = await keyedUser(gw, 100_000_000);
});
afterAll(async () => {
  for (const d of Object.values(doubles)) await d.stop();
  await gw.stop();
});

/** The client's system prompt (string or blocks) plus any system turns, as the texts an upstream should see, in order. */
function expectedSystemTexts(body: Record<string, any>): string[] {
  const sys = body.system === undefined ? [] : typeof body.system === 'string' ? [body.system] : body.system.map((b: any) => b.text);
  const turns = body.messages.filter((m: any) => m.role === 'system').map((m: any) => (typeof m.content === 'string' ? m.content : m.content.map((b: any) => b.text).join('')));
  return [...sys, ...turns];
}

function checkNativeUpstream(fx: ClientFixture, body: Record<string, any>, up: RecordedRequest) {
  expect(up.path).toBe('/v1/messages');
  expect(up.headers['anthropic-beta'] ?? null).toBe(fx.headers['anthropic-beta'] ?? null);
  const { system: _s, messages: _m, model: _model, ...rest } = body;
  const { system, messages, model, ...upRest } = up.body;
  expect(model).toBe(CHANNELS.anthropic.upstream);
  expect(upRest).toEqual(rest); // everything else passes through untouched (cache_control, metadata, thinking, tools)
  expect(messages).toEqual(body.messages.filter((m: any) => m.role !== 'system'));
  const texts = expectedSystemTexts(body);
  if (!texts.length) expect(system).toBeUndefined();
  else if (typeof body.system === 'string' && texts.length === 1) expect(system).toBe(body.system);
  else {
    expect(system.map((b: any) => b.text)).toEqual(texts);
    if (Array.isArray(body.system)) expect(system.slice(0, body.system.length)).toEqual(body.system); // cache_control kept
  }
}

function checkTranslatedUpstream(kind: Kind, body: Record<string, any>, up: RecordedRequest) {
  expect(up.path).toBe('/v1/chat/completions');
  const o = up.body;
  expect(o.model).toBe(CHANNELS[kind].upstream);
  expect(o[kind === 'openai' ? 'max_completion_tokens' : 'max_tokens']).toBe(body.max_tokens);
  expect(o.messages.every((m: any) => ['system', 'user', 'assistant', 'tool'].includes(m.role))).toBe(true);
  const texts = expectedSystemTexts(body);
  if (texts.length) {
    expect(o.messages[0].role).toBe('system');
    for (const t of texts) expect(o.messages[0].content).toContain(t);
  }
  expect(o.messages.filter((m: any) => m.role === 'system')).toHaveLength(texts.length ? 1 : 0);
  // Limits: user ≤ 64 (stable), function names valid and distinct, ≤ 128 tools, ≤ 4 stop strings, call ids ≤ 40.
  const userId = body.metadata?.user_id;
  if (userId) {
    expect(o.user.length).toBeLessThanOrEqual(64);
    if (userId.length <= 64) expect(o.user).toBe(userId);
  }
  if (body.tools) {
    const names = o.tools.map((t: any) => t.function.name);
    expect(names).toHaveLength(body.tools.length);
    expect(names.every((n: string) => FUNCTION_NAME.test(n))).toBe(true);
    expect(new Set(names).size).toBe(names.length);
  }
  for (const m of o.messages) for (const c of m.tool_calls ?? []) expect(FUNCTION_NAME.test(c.function.name) && c.id.length <= 40).toBe(true);
  expect((o.stop ?? []).length).toBeLessThanOrEqual(4);
  if (body.stop_sequences) expect(o.stop).toEqual(body.stop_sequences);
  // thinking → reasoning_effort only where the adapter takes it.
  if (body.thinking?.type === 'enabled' && kind === 'openai') expect(o.reasoning_effort).toBe('high');
  else expect(o.reasoning_effort).toBeUndefined();
  if (body.stream) expect(o.stream_options).toEqual({ include_usage: true });
  // Anthropic-only fields never reach an OpenAI upstream.
  for (const k of ['system', 'thinking', 'metadata', 'top_k', 'tool_choice_anthropic']) expect(Object.keys(o)).not.toContain(k);
  expect(up.rawBody).not.toContain('cache_control');
}

describe.each(Object.keys(CHANNELS) as Kind[])('client fixtures on a %s channel', (kind) => {
  test.each(FIXTURES.map((f) => [f.name, f] as const))('%s', async (_name, fx) => {
    current = fx;
    const model = CHANNELS[kind].model;
    const body: Record<string, any> = { ...fx.body, model };
    const before = doubles[kind].count;
    const res = await fetch(`${gw.url}/v1/messages`, {
      method: 'POST', headers: { ...fx.headers, 'content-type': 'application/json', authorization: `Bearer ${user.key}` }, body: JSON.stringify(body),
    });
    const text = await res.text();
    // (a) 200 and a well-formed answer, echoing the client's model.
    expect({ status: res.status, text: res.status === 200 ? '' : text }).toEqual({ status: 200, text: '' });
    const got: Received = body.stream ? checkStream(text) : checkMessage(JSON.parse(text));
    expect(got.model).toBe(model);
    if (body.stream) expect(got.events).toContain('ping'); // translated streams: right after message_start
    if (fx.plan?.callLastTool) {
      const call = got.content.find((b) => b.type === 'tool_use');
      expect(call?.name).toBe(body.tools.at(-1).name); // the client's name, even when renamed upstream
      expect(call?.input).toEqual({ q: 'x' });
      expect(got.stopReason).toBe('tool_use');
    }
    if (fx.plan?.reasoning && kind !== 'anthropic') {
      expect(got.content[0]).toEqual({ type: 'thinking', thinking: fx.plan.reasoning, signature: '' });
      expect(got.content.slice(1).map((b) => b.type)).not.toContain('thinking');
    }
    // (b) what the upstream received.
    expect(doubles[kind].count).toBe(before + 1);
    const up = doubles[kind].requests.at(-1)!;
    if (kind === 'anthropic') checkNativeUpstream(fx, body, up);
    else checkTranslatedUpstream(kind, body, up);
    // (c) billed.
    const requestId = res.headers.get('request-id');
    const logs = await gw.api('GET', '/api/log/self?page_size=100', undefined, user.token);
    const row = logs.body.data.items.find((l: any) => l.request_id === requestId);
    expect(row).toMatchObject({ status: 200, model });
    expect(row.cost).toBeGreaterThan(0);
    expect(row.input_tokens + row.cache_read_tokens + row.cache_write_tokens).toBeGreaterThan(0);
    expect(row.output_tokens).toBeGreaterThan(0);
  });
});

describe('the official SDK rebuilds translated reasoning and renamed tools', () => {
  test('MessageStream.finalMessage over a translated stream: thinking first, tool_use under the client name', async () => {
    const fx = FIXTURES.find((f) => f.name === 'claude-code-turn')!;
    current = fx;
    const client = new Anthropic({ apiKey: user.key, baseURL: gw.url, maxRetries: 0 });
    const { stream: _s, ...body } = fx.body;
    const m = await client.messages.stream({ ...body, model: CHANNELS.openai.model } as any).finalMessage();
    expect(m.content.map((b) => b.type)).toEqual(['thinking', 'text', 'tool_use']);
    expect((m.content[2] as any).name).toBe(fx.body.tools.at(-1).name);
    expect(m.stop_reason).toBe('tool_use');
  });
});
