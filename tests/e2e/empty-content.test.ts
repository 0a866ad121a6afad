/**
 * Empty message content is refused the way Anthropic refuses it, 400 invalid_request_error, before any upstream
 * call, hold or charge, on every channel type: a user (or non-final assistant) turn with `""` or `[]`, and a text block
 * with `""` anywhere. Before, an OpenAI-compatible channel answered such a request (and it was billed), while an
 * Anthropic channel refused it upstream. The optional final assistant turn (a prefill) may be empty.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import type { TestGateway } from '../helpers/gateway';
import { bothChannelTypes, keyedUser, send, type Scripted, V } from './relay-setup';

let gw: TestGateway;
let oai: Scripted;
let native: Scripted;
let stop: () => Promise<void>;
beforeAll(async () => {
  ({ gw, oai, native, stop } = await bothChannelTypes());
});
afterAll(() => stop());

const NON_EMPTY = 'all messages must have non-empty content except for the optional final assistant message';
const TEXT_EMPTY = 'text content blocks must be non-empty';
const cases: [string, unknown[], string][] = [
  ['user ""', [{ role: 'user', content: '' }], `messages.0: ${NON_EMPTY}`],
  ['user []', [{ role: 'user', content: [] }], `messages.0: ${NON_EMPTY}`],
  ['user text block ""', [{ role: 'user', content: [{ type: 'text', text: '' }] }], `messages: ${TEXT_EMPTY}`],
  ['user "" text block after a good one', [{ role: 'user', content: [{ type: 'text', text: 'Hi' }, { type: 'text', text: '' }] }], `messages: ${TEXT_EMPTY}`],
  ['a later user ""', [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello' }, { role: 'user', content: '' }], `messages.2: ${NON_EMPTY}`],
  ['a non-final assistant ""', [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: '' }, { role: 'user', content: 'Go on' }], `messages.1: ${NON_EMPTY}`],
  ['a final assistant text block ""', [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: [{ type: 'text', text: '' }] }], `messages: ${TEXT_EMPTY}`],
];

describe('empty content is refused before any upstream call or charge', () => {
  for (const model of ['oai-m', 'native-m']) {
    test(`${model}: each empty shape gets Anthropic's 400, nothing sent, held or billed`, async () => {
      const u = await keyedUser(gw, 1_000_000);
      const hits = oai.hits + native.hits;
      for (const stream of [false, true]) {
        for (const [name, messages, message] of cases) {
          const r = await send(gw, u.key, { model, max_tokens: 50, stream, messages });
          expect({ name, status: r.status, body: r.body }).toMatchObject({ name, status: 400, body: { type: 'error', error: { type: 'invalid_request_error', message } } });
        }
      }
      // count_tokens is checked alike (an Anthropic channel would be asked for a count of a body it refuses).
      const c = await fetch(`${gw.url}/v1/messages/count_tokens`, { method: 'POST', headers: { ...V, 'content-type': 'application/json', 'x-api-key': u.key }, body: JSON.stringify({ model, messages: [{ role: 'user', content: '' }] }) });
      expect(c.status).toBe(400);
      expect(oai.hits + native.hits).toBe(hits);
      gw.services.relay.quota.flush();
      expect(await gw.db.get('select count(*) as n from usage_logs where user_id = ?', u.id)).toEqual({ n: 0 });
      expect(await gw.services.ledger.sum(u.id)).toBe(1_000_000);
    }, 20_000);
  }

  test('an empty final assistant turn (a prefill) and empty tool results are still accepted', async () => {
    const u = await keyedUser(gw, 1_000_000);
    for (const model of ['oai-m', 'native-m']) {
      for (const last of ['', []]) {
        const r = await send(gw, u.key, { model, max_tokens: 50, messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: last }] });
        expect({ model, last, status: r.status }).toEqual({ model, last, status: 200 });
      }
      const tool = await send(gw, u.key, {
        model, max_tokens: 50, tools: [{ name: 'f', input_schema: { type: 'object' } }],
        messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'f', input: {} }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '' }] }],
      });
      expect(tool.status).toBe(200);
    }
  }, 20_000);
});
