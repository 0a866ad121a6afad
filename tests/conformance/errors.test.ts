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
let key: string;
beforeAll(async () => {
  gw = await startGateway();
  ant = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['team-claude'] });
  await setPrice(gw, 'team-claude');
  key = (await keyedUser(gw)).key;
});
afterAll(async () => { await ant.stop(); await gw.stop(); });

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
