/**
 * Empty message content is refused the way Anthropic refuses it, 400 invalid_request_error, before any upstream
 * call, hold or charge, on every channel type: a user (or non-final assistant) turn with `""` or `[]`, and a text block
 * with `""` anywhere. Before, an OpenAI-compatible channel answered such a request (and it was billed), while an
 * Anthropic channel refused it upstream. The optional final assistant turn (a prefill) may be empty, but not end in
 * whitespace. Whitespace-only text is refused when its turn (or tool_result) has no text block with real text; a
 * tool_result's string content is one text block (`"  "` was passed on while `[{"type":"text","text":"  "}]` was
 * refused). A tool_result itself may be empty.
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
const TEXT_BLANK = 'text content blocks must contain non-whitespace text';
const PREFILL_TRAILING = 'final assistant content cannot end with trailing whitespace';
/** A tool call answered with `content`. */
function toolTurn(content: unknown): unknown[] {
  return [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'f', input: {} }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content }] }];
}
const cases: [string, unknown[], string][] = [
  ['user ""', [{ role: 'user', content: '' }], `messages.0: ${NON_EMPTY}`],
  ['user []', [{ role: 'user', content: [] }], `messages.0: ${NON_EMPTY}`],
  ['user text block ""', [{ role: 'user', content: [{ type: 'text', text: '' }] }], `messages: ${TEXT_EMPTY}`],
  ['user "" text block after a good one', [{ role: 'user', content: [{ type: 'text', text: 'Hi' }, { type: 'text', text: '' }] }], `messages: ${TEXT_EMPTY}`],
  ['a later user ""', [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello' }, { role: 'user', content: '' }], `messages.2: ${NON_EMPTY}`],
  ['a non-final assistant ""', [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: '' }, { role: 'user', content: 'Go on' }], `messages.1: ${NON_EMPTY}`],
  ['a final assistant text block ""', [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: [{ type: 'text', text: '' }] }], `messages: ${TEXT_EMPTY}`],
  // Whitespace-only text: refused unless the same turn has a text block with real text (as Anthropic does).
  ['user text block "   \\n"', [{ role: 'user', content: [{ type: 'text', text: '   \n' }] }], `messages: ${TEXT_BLANK}`],
  ['user string "\\t "', [{ role: 'user', content: '\t ' }], `messages: ${TEXT_BLANK}`],
  ['assistant " " beside a tool_use', [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: [{ type: 'text', text: ' ' }, { type: 'tool_use', id: 'toolu_1', name: 'f', input: {} }] }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'ok' }] }], `messages: ${TEXT_BLANK}`],
  ['a final assistant "  "', [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: '  ' }], `messages: ${TEXT_BLANK}`],
  ['a final assistant prefill ending in whitespace', [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'The answer is ' }], `messages: ${PREFILL_TRAILING}`],
  ['a final assistant text block ending in a newline', [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: [{ type: 'text', text: 'Sure:\n' }] }], `messages: ${PREFILL_TRAILING}`],
  // Inside a tool_result: empty content is fine, empty or blank text blocks are not.
  ['tool_result text block ""', toolTurn([{ type: 'text', text: '' }]), `messages: ${TEXT_EMPTY}`],
  ['tool_result text block " \\n"', toolTurn([{ type: 'text', text: ' \n' }]), `messages: ${TEXT_BLANK}`],
  // A tool_result's string content is one text block: whitespace-only is refused as the block is.
  ['tool_result string "   "', toolTurn('   '), `messages: ${TEXT_BLANK}`],
  ['tool_result string " \\n\\t"', toolTurn(' \n\t'), `messages: ${TEXT_BLANK}`],
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
      for (const content of ['', [{ type: 'text', text: '   \n' }]]) {
        const c = await fetch(`${gw.url}/v1/messages/count_tokens`, { method: 'POST', headers: { ...V, 'content-type': 'application/json', 'x-api-key': u.key }, body: JSON.stringify({ model, messages: [{ role: 'user', content }] }) });
        expect({ content, status: c.status }).toEqual({ content, status: 400 });
      }
      expect(oai.hits + native.hits).toBe(hits);
      gw.services.relay.quota.flush();
      expect(await gw.db.get('select count(*) as n from usage_logs where user_id = ?', u.id)).toEqual({ n: 0 });
      expect(await gw.services.ledger.sum(u.id)).toBe(1_000_000);
    }, 20_000);
  }

  test('a whitespace-only tool_result string is named as its block form is', async () => {
    const u = await keyedUser(gw, 1_000_000);
    for (const model of ['oai-m', 'native-m']) {
      for (const [content, param] of [['  ', 'messages[2].content[0].content'], [[{ type: 'text', text: '  ' }], 'messages[2].content[0].content[0].text']] as const) {
        const r = await send(gw, u.key, { model, max_tokens: 50, messages: toolTurn(content) });
        expect({ model, content, status: r.status, code: r.body?.error?.code, param: r.body?.error?.param }).toEqual({ model, content, status: 400, code: 'invalid_value', param });
      }
    }
  });

  test('an empty final assistant turn (a prefill), empty tool results and blank text beside real text are still accepted', async () => {
    const u = await keyedUser(gw, 1_000_000);
    for (const model of ['oai-m', 'native-m']) {
      for (const last of ['', [], 'The answer is', [{ type: 'text', text: ' ' }, { type: 'text', text: 'Sure' }]]) {
        const r = await send(gw, u.key, { model, max_tokens: 50, messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: last }] });
        expect({ model, last, status: r.status }).toEqual({ model, last, status: 200 });
      }
      const mixed = await send(gw, u.key, { model, max_tokens: 50, messages: [{ role: 'user', content: [{ type: 'text', text: ' \n' }, { type: 'text', text: 'Hi' }] }] });
      expect(mixed.status).toBe(200);
      for (const content of ['', [], undefined, ' ok \n', [{ type: 'text', text: 'ok' }]]) {
        const tool = await send(gw, u.key, { model, max_tokens: 50, tools: [{ name: 'f', input_schema: { type: 'object' } }], messages: toolTurn(content) });
        expect({ model, content, status: tool.status }).toEqual({ model, content, status: 200 });
      }
    }
  }, 20_000);
});
