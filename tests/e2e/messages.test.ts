import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfWindowEdge } from '../helpers/window-edge';
import { V, addChannel, upstream, type Scripted, eventNames, keyedUser, msg, send, setPrice } from './relay-setup';

let gw: TestGateway;
let ant: Scripted;
let oai: Scripted;
let u: Awaited<ReturnType<typeof keyedUser>>;
beforeAll(async () => {
  gw = await startGateway();
  ant = upstream('anthropic');
  oai = upstream('openai');
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['claude-x'], mapping: { 'claude-x': 'claude-x-up' } });
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['gpt-x'] });
  await setPrice(gw, 'claude-x');
  await setPrice(gw, 'gpt-x');
  await setPrice(gw, 'ghost');
  u = await keyedUser(gw);
});
afterAll(async () => { await ant.stop(); await oai.stop(); await gw.stop(); });

const err = (r: { status: number; body: any; headers: Headers }, status: number, type: string, code: string, param = '') => {
  expect(r.status).toBe(status);
  expect(r.body.type).toBe('error');
  expect(r.body.error).toEqual({ type, code, param, message: expect.any(String) });
  expect(r.body.request_id).toBe(r.headers.get('request-id'));
};

describe('check order and error statuses', () => {
  test('401 before 400: no key with a bad header and bad JSON', async () => {
    err(await send(gw, null, '{bad', {}), 401, 'authentication_error', 'missing_api_key');
    err(await send(gw, 'sk-nope', '{bad', {}), 401, 'authentication_error', 'invalid_api_key');
    err(await send(gw, gw.rootToken, msg('claude-x')), 401, 'authentication_error', 'wrong_credential_kind');
  });
  test('Authorization: Bearer works like x-api-key', async () => {
    const r = await send(gw, null, msg('claude-x'), { ...V, authorization: `Bearer ${u.key}` });
    expect(r.status).toBe(200);
  });
  test('version header: missing, invalid date, alias, vendor-version wins', async () => {
    err(await send(gw, u.key, '{bad', {}), 400, 'invalid_request_error', 'missing_header', 'vendor-version');
    err(await send(gw, u.key, msg('claude-x'), { 'vendor-version': '2023-02-30' }), 400, 'invalid_request_error', 'invalid_header', 'vendor-version');
    expect((await send(gw, u.key, msg('claude-x'), { 'anthropic-version': '2023-06-01' })).status).toBe(200);
    err(await send(gw, u.key, msg('claude-x'), { 'vendor-version': 'x', 'anthropic-version': '2023-06-01' }), 400, 'invalid_request_error', 'invalid_header', 'vendor-version');
  });
  test('JSON then schema, param names the first bad field', async () => {
    err(await send(gw, u.key, '{bad'), 400, 'invalid_request_error', 'invalid_json');
    const badRole = await send(gw, u.key, { model: 'claude-x', messages: [{ role: 'bot', content: 'x' }], max_tokens: 5 });
    err(badRole, 400, 'invalid_request_error', 'invalid_value', 'messages[0].role');
    expect(badRole.body.error.message).toBe("messages.0.role: Input should be 'user' or 'assistant'");
    err(await send(gw, u.key, { model: 'claude-x', messages: [{ role: 'user', content: 'x' }] }), 400, 'invalid_request_error', 'missing_field', 'max_tokens');
    err(await send(gw, u.key, msg('claude-x', { max_tokens: '5' })), 400, 'invalid_request_error', 'invalid_type', 'max_tokens');
    err(await send(gw, u.key, msg('claude-x', { temperature: 1.5 })), 400, 'invalid_request_error', 'out_of_range', 'temperature');
  });
  test('key rules 401/403, rate limit 429, quota 402, routing 404/503', async () => {
    const limited = await keyedUser(gw, 1_000_000, { models: ['gpt-x'], rate_limit_rpm: 1 });
    err(await send(gw, limited.key, msg('claude-x')), 403, 'permission_error', 'model_not_allowed', 'model');
    await clearOfWindowEdge();
    expect((await send(gw, limited.key, msg('gpt-x'))).status).toBe(200);
    const rl = await send(gw, limited.key, msg('gpt-x'));
    err(rl, 429, 'rate_limit_error', 'key_rpm_exceeded');
    expect(Number(rl.headers.get('retry-after'))).toBeGreaterThan(0);
    const ipKey = await keyedUser(gw, 1_000_000, { allow_ips: ['10.9.9.9'] });
    err(await send(gw, ipKey.key, msg('claude-x')), 403, 'permission_error', 'ip_not_allowed');
    const poor = await keyedUser(gw, 0);
    err(await send(gw, poor.key, msg('claude-x')), 402, 'billing_error', 'quota_exhausted');
    err(await send(gw, u.key, msg('nope-model')), 404, 'invalid_request_error', 'model_not_found', 'model');
    err(await send(gw, u.key, msg('unpriced')), 404, 'invalid_request_error', 'model_not_found', 'model');
    // A served model with no price is refused rather than given away.
    const ch = await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['free-lunch'] });
    err(await send(gw, u.key, msg('free-lunch')), 403, 'permission_error', 'model_not_priced', 'model');
    await setPrice(gw, 'free-lunch');
    await gw.api('PUT', '/api/channel/', { id: ch, status: 2 });
    err(await send(gw, u.key, msg('free-lunch')), 503, 'overloaded_error', 'no_healthy_channel');
    const off = await gw.api('PUT', '/api/token/', { id: u.keyId, status: 2 }, u.token);
    expect(off.status).toBe(200);
    err(await send(gw, u.key, msg('claude-x')), 401, 'authentication_error', 'api_key_disabled');
    await gw.api('PUT', '/api/token/', { id: u.keyId, status: 1 }, u.token);
  }, 30_000);
});

describe('native pass-through (anthropic channel)', () => {
  test('non-streaming: model mapped upstream, echoed to the client, anthropic-beta forwarded', async () => {
    const r = await send(gw, u.key, msg('claude-x', { system: [{ type: 'text', text: 'be brief', cache_control: { type: 'ephemeral' } }], metadata: { user_id: 'x' } }), { ...V, 'anthropic-beta': 'prompt-caching-2024-07-31' });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ type: 'message', role: 'assistant', model: 'claude-x', content: [{ type: 'text', text: 'Hello there' }], usage: { input_tokens: expect.any(Number), output_tokens: expect.any(Number) } });
    const last = ant.last();
    expect(last.body.model).toBe('claude-x-up');
    expect(last.body.system[0].cache_control).toEqual({ type: 'ephemeral' });
    expect(last.headers['anthropic-beta']).toBe('prompt-caching-2024-07-31');
    expect(last.headers['x-api-key']).toBe('upstream-key');
    expect(r.headers.get('request-id')).toMatch(/^req_/);
  });
  test('SSE: exact event sequence, model echoed', async () => {
    const r = await send(gw, u.key, msg('claude-x', { stream: true }));
    expect(r.headers.get('content-type')).toContain('text/event-stream');
    expect(eventNames(r.text)).toEqual(['message_start', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
    expect(r.text).toContain('"model":"claude-x"');
    expect(r.text).not.toContain('claude-x-up');
  });
});

describe('translated path (openai channel)', () => {
  test('text, non-streaming', async () => {
    const r = await send(gw, u.key, msg('gpt-x', { system: 'sys', stop_sequences: ['END'] }));
    expect(r.body).toMatchObject({ type: 'message', model: 'gpt-x', content: [{ type: 'text', text: 'Hello there' }], stop_reason: 'end_turn', usage: { input_tokens: expect.any(Number), output_tokens: expect.any(Number) } });
    const up = oai.last().body;
    expect(up.messages[0]).toEqual({ role: 'system', content: 'sys' });
    expect(up.stop).toEqual(['END']);
  });
  test('tools: tool_use in, tool_calls out, and back', async () => {
    oai.queue.push({ text: '', toolCalls: [{ name: 'lookup', input: { q: 'x' } }] });
    const r = await send(gw, u.key, msg('gpt-x', { tools: [{ name: 'lookup', input_schema: { type: 'object', properties: { q: { type: 'string' } } } }], tool_choice: { type: 'any' } }));
    expect(r.body.stop_reason).toBe('tool_use');
    expect(r.body.content[0]).toMatchObject({ type: 'tool_use', name: 'lookup', input: { q: 'x' } });
    const up = oai.last().body;
    expect(up.tools[0]).toMatchObject({ type: 'function', function: { name: 'lookup' } });
    expect(up.tool_choice).toBe('required');
  });
  test('streaming: the golden Anthropic sequence reaches the client (text and tool use)', async () => {
    const r = await send(gw, u.key, msg('gpt-x', { stream: true }));
    expect(eventNames(r.text)).toEqual(['message_start', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
    expect(r.text).toContain('"stop_reason":"end_turn"');
    expect(oai.last().body.stream_options).toEqual({ include_usage: true });
    oai.queue.push({ text: '', toolCalls: [{ name: 'lookup', input: { q: 'xyz' } }] });
    const t = await send(gw, u.key, msg('gpt-x', { stream: true, tools: [{ name: 'lookup', input_schema: { type: 'object' } }] }));
    expect(eventNames(t.text)).toEqual(['message_start', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
    expect(t.text).toContain('"stop_reason":"tool_use"');
    const json = [...t.text.matchAll(/"partial_json":"((?:[^"\\]|\\.)*)"/g)].map((m) => JSON.parse(`"${m[1]}"`)).join('');
    expect(JSON.parse(json)).toEqual({ q: 'xyz' });
  });
});

describe('translated path: upstream quirks (raw OpenAI answers)', () => {
  const chunk = (delta: object, finish: string | null = null) => ({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'up', choices: [{ index: 0, delta, finish_reason: finish }] });
  const sse = (frames: unknown[]) => () => new Response(frames.map((f) => (typeof f === 'string' ? f : `data: ${JSON.stringify(f)}\n\n`)).join(''), { headers: { 'content-type': 'text/event-stream' } });
  const events = (text: string) => text.split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)));
  const tools = [{ name: 'bash', input_schema: { type: 'object', properties: { command: { type: 'string' } } } }];

  test('stream: a tool name sent after the first fragment names the block', async () => {
    oai.queue.push({ response: sse([
      chunk({ role: 'assistant', content: '' }),
      chunk({ tool_calls: [{ index: 0, id: 'call_123', type: 'function', function: { arguments: '' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { name: 'bash' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '{"command":"ls -la"}' } }] }),
      chunk({}, 'tool_calls'),
      'data: [DONE]\n\n',
    ]) });
    const ev = events((await send(gw, u.key, msg('gpt-x', { stream: true, tools }))).text);
    expect(ev.filter((e) => e.type === 'content_block_start').map((e) => e.content_block)).toEqual([{ type: 'tool_use', id: 'call_123', name: 'bash', input: {} }]);
    expect(ev.filter((e) => e.delta?.type === 'input_json_delta').map((e) => e.delta.partial_json).join('')).toBe('{"command":"ls -la"}');
  });

  test('tool calls with finish_reason "stop" (named tool_choice) are tool_use, JSON and stream', async () => {
    const call = { id: 'call_1', type: 'function', function: { name: 'bash', arguments: '{"command":"ls"}' } };
    oai.queue.push({ response: () => Response.json({ id: 'c', object: 'chat.completion', created: 1, model: 'up', usage: { prompt_tokens: 30, completion_tokens: 8, total_tokens: 38 },
      choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: null, tool_calls: [call] } }] }) });
    const r = await send(gw, u.key, msg('gpt-x', { tools, tool_choice: { type: 'tool', name: 'bash' } }));
    expect(r.body).toMatchObject({ stop_reason: 'tool_use', content: [{ type: 'tool_use', id: 'call_1', name: 'bash', input: { command: 'ls' } }] });
    oai.queue.push({ response: sse([chunk({ tool_calls: [{ index: 0, ...call }] }), chunk({}, 'stop'), 'data: [DONE]\n\n']) });
    const ev = events((await send(gw, u.key, msg('gpt-x', { stream: true, tools, tool_choice: { type: 'tool', name: 'bash' } }))).text);
    expect(ev.find((e) => e.type === 'message_delta').delta.stop_reason).toBe('tool_use');
  });

  test('JSON without usage: the client gets the usage that is billed', async () => {
    oai.queue.push({ response: () => Response.json({ id: 'c', object: 'chat.completion', created: 1, model: 'up',
      choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'Once upon a time a fox met a crow who held a piece of cheese.' } }] }) });
    const r = await send(gw, u.key, msg('gpt-x'));
    const row = await gw.db.get<any>('select * from usage_logs where request_id = ?', r.headers.get('request-id'));
    expect(r.body.usage.output_tokens).toBeGreaterThan(0);
    expect(r.body.usage.input_tokens).toBeGreaterThan(0);
    expect([r.body.usage.input_tokens, r.body.usage.output_tokens]).toEqual([row.input_tokens, row.output_tokens]);
    expect(row.usage_flag).toBe('estimated');
  });

  test('stream: an error chunk that also carries choices (OpenRouter) ends in an error event, not a finished message', async () => {
    oai.queue.push({ response: sse([
      chunk({ role: 'assistant', content: '' }),
      chunk({ content: 'The first part of the essay, and then' }),
      { id: 'gen-1', object: 'chat.completion.chunk', created: 1, model: 'up', provider: 'x', error: { code: 'server_error', message: 'Provider disconnected unexpectedly' }, choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }] },
      'data: [DONE]\n\n',
    ]) });
    const r = await send(gw, u.key, msg('gpt-x', { stream: true }));
    const types = events(r.text).map((e) => e.type);
    expect(types.at(-1)).toBe('error');
    expect(types).not.toContain('message_stop');
  });
});

describe('companions', () => {
  test('count_tokens: anthropic channel passes through; openai channel estimates locally', async () => {
    ant.queue.push({ usage: { input: 4242 } });
    const a = await fetch(`${gw.url}/v1/messages/count_tokens`, { method: 'POST', headers: { ...V, 'x-api-key': u.key, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'claude-x', messages: [{ role: 'user', content: 'hi' }] }) });
    expect(await a.json()).toEqual({ input_tokens: 4242 });
    expect(ant.last().path).toBe('/v1/messages/count_tokens');
    const b = await fetch(`${gw.url}/v1/messages/count_tokens`, { method: 'POST', headers: { ...V, 'x-api-key': u.key, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'gpt-x', messages: [{ role: 'user', content: 'hello world, twelve words or so' }] }) });
    const n = ((await b.json()) as any).input_tokens;
    expect(n).toBeGreaterThan(5);
    expect(n).toBeLessThan(40);
  });
  test('models: allow-list ∩ served models, Anthropic list shape', async () => {
    const all = await (await fetch(`${gw.url}/v1/models`, { headers: { 'x-api-key': u.key } })).json() as any;
    expect(all.data.map((m: any) => m.id)).toEqual(['claude-x', 'gpt-x']);
    expect(all.data[0]).toEqual({ type: 'model', id: 'claude-x', display_name: 'claude-x', created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) });
    expect(all).toMatchObject({ has_more: false, first_id: 'claude-x', last_id: 'gpt-x' });
    const k = await keyedUser(gw, 1000, { models: ['gpt-x', 'not-served'] });
    const some = await (await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${k.key}` } })).json() as any;
    expect(some.data.map((m: any) => m.id)).toEqual(['gpt-x']);
  });
});
