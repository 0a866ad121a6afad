/**
 * The gateway's own validation errors read like Anthropic's over real HTTP (clients key recovery on the
 * wording): `<path with dots>: <pydantic-like message>`, type invalid_request_error, `param` in the
 * gateway's `messages[0].role` form. And the Claude Code sequence that depends on it never needs the
 * retry: its system turn is accepted on first send.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let ant: Scripted;
let oai: Scripted;
let key: string;
beforeAll(async () => {
  gw = await startGateway();
  ant = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['team-claude'] });
  await setPrice(gw, 'team-claude');
  oai = upstream('openai');
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['team-gpt'] });
  await setPrice(gw, 'team-gpt');
  key = (await keyedUser(gw)).key;
});
afterAll(async () => { await ant.stop(); await oai.stop(); await gw.stop(); });

const base = { model: 'team-claude', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] };

describe('Anthropic-worded validation errors', () => {
  test.each([
    [{ model: 'team-claude', messages: base.messages }, 'max_tokens: Field required', 'max_tokens'],
    [{ ...base, messages: [{ role: 'user', content: 7 }] }, 'messages.0.content: Input should be a valid list', 'messages[0].content'],
    [{ ...base, temperature: 2 }, 'temperature: Input should be less than or equal to 1', 'temperature'],
    [{ ...base, messages: [{ role: 'user', content: 'a' }, { role: 'tool', content: 'b' }] }, "messages.1.role: Input should be 'user' or 'assistant'", 'messages[1].role'],
  ] as Array<[unknown, string, string]>)('%j', async (body, message, param) => {
    const r = await send(gw, key, body);
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({ type: 'error', error: { type: 'invalid_request_error', message, param } });
    expect(ant.hits).toBe(0);
  });

  test('a system turn is folded into system on first send (no error, no retry needed)', async () => {
    const r = await send(gw, key, { ...base, system: [{ type: 'text', text: 'S1', cache_control: { type: 'ephemeral' } }], messages: [...base.messages, { role: 'system', content: 'S2' }] });
    expect(r.status).toBe(200);
    expect(ant.last().body.system).toEqual([{ type: 'text', text: 'S1', cache_control: { type: 'ephemeral' } }, { type: 'text', text: 'S2' }]);
    expect(ant.last().body.messages).toEqual(base.messages);
  });
});

describe('upstream context-window errors in Anthropic\'s words', () => {
  // Claude Code compacts the conversation when an error's message contains "prompt is too long" or "input length
  // and `max_tokens` exceed context limit" (Anthropic's wordings); OpenAI-compatible servers word it otherwise,
  // so a translated channel's client stayed stuck on the error instead of compacting.
  const gpt = { ...base, model: 'team-gpt' };
  test.each([
    ['OpenAI', { message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens. Please reduce the length of the messages.", type: 'invalid_request_error' },
      'prompt is too long: 130532 tokens > 128000 maximum'],
    ['vLLM, with max_tokens', { message: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion." },
      'input length and `max_tokens` exceed context limit: 4000 + 1000 > 4096, decrease input length or `max_tokens` and try again'],
    ['vLLM, input alone', { message: "This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens. Please reduce the length of the input messages." },
      'prompt is too long: 5000 tokens > 4096 maximum'],
    ['vLLM, max_tokens too large', { message: "'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum context length is 4096 tokens and your request has 3500 input tokens (1000 > 4096 - 3500)." },
      'input length and `max_tokens` exceed context limit: 3500 + 1000 > 4096, decrease input length or `max_tokens` and try again'],
    ['no counts', { message: 'Your input exceeds the context window of this model. Please adjust your input and try again.' },
      'prompt is too long: Your input exceeds the context window of this model. Please adjust your input and try again.'],
  ] as Array<[string, { message: string; type?: string }, string]>)('%s', async (_name, e, message) => {
    for (const stream of [false, true]) {
      oai.queue.push({ error: { status: 400, ...e } });
      const r = await send(gw, key, { ...gpt, stream });
      expect(r.status).toBe(400);
      expect(r.body).toMatchObject({ type: 'error', error: { type: 'invalid_request_error', message, code: 'prompt_too_long' } });
    }
  });

  test('an Anthropic channel\'s own wording reaches the client as it is, without the gateway\'s prefix', async () => {
    ant.queue.push({ error: { status: 400, message: 'prompt is too long: 208310 tokens > 200000 maximum' } });
    const r = await send(gw, key, base);
    expect(r.body.error).toMatchObject({ message: 'prompt is too long: 208310 tokens > 200000 maximum', code: 'prompt_too_long' });
  });

  test('other upstream 400s keep their wording', async () => {
    oai.queue.push({ error: { status: 400, message: "Invalid value for 'tool_choice'." } });
    const r = await send(gw, key, { ...base, model: 'team-gpt' });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ message: "The upstream rejected the request: Invalid value for 'tool_choice'.", code: 'upstream_invalid_request' });
  });
});
