/**
 * Anthropic's server-side compaction (`context_management.edits: [{type: "compact_20260112", …}]`, beta
 * `compact-2026-01-12`) runs an extra sampling step that reads the whole conversation and writes a summary. Anthropic
 * bills it, but reports it only in `usage.iterations`: the top-level counts the gateway bills are the message
 * iteration's. A client could make every request compact (the trigger goes down to 50,000 input tokens) and have
 * 180,000 input and 3,500 output tokens per request billed to the operator and not to itself. Such a request is
 * refused before anything is held or sent, on every channel type, over real HTTP.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let ant: Scripted;
let oai: Scripted;
let user: Awaited<ReturnType<typeof keyedUser>>;
const BALANCE = 100_000_000;
const HEADERS = { 'vendor-version': '2023-06-01', 'anthropic-beta': 'compact-2026-01-12' };
const body = (model: string, edits: unknown[], stream = false) => ({
  model, max_tokens: 50, stream, messages: [{ role: 'user', content: 'Hi' }], context_management: { edits },
});

beforeAll(async () => {
  gw = await startGateway();
  ant = upstream('anthropic');
  oai = upstream('openai');
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['native'] });
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['translated'] });
  await setPrice(gw, 'native');
  await setPrice(gw, 'translated');
  user = await keyedUser(gw, BALANCE);
});
afterAll(async () => { await ant.stop(); await oai.stop(); await gw.stop(); });

const balance = async () => { gw.services.relay.quota.flush(); return (await gw.services.users.byId(user.id))!.quota; };

describe('server-side compaction', () => {
  for (const model of ['native', 'translated']) {
    for (const stream of [false, true]) {
      for (const type of ['compact_20260112', ' COMPACT_20990101']) {
        test(`${model}, ${stream ? 'stream' : 'JSON'}, "${type}": 400 naming the edit; nothing sent, nothing charged`, async () => {
          const hits = ant.hits + oai.hits;
          const before = await balance();
          const edits = [{ type: 'clear_tool_uses_20250919' }, { type, trigger: { type: 'input_tokens', value: 50_000 } }];
          const r = await send(gw, user.key, body(model, edits, stream), HEADERS);
          expect(r.status).toBe(400);
          expect(r.body.error).toMatchObject({ type: 'invalid_request_error' });
          expect(r.body.error.message).toContain('compaction');
          expect(ant.hits + oai.hits).toBe(hits);
          expect(await balance()).toBe(before);
        });
      }
    }
  }

  test('other context-management edits (clearing tool results or thinking) still pass', async () => {
    const r = await send(gw, user.key, body('native', [{ type: 'clear_tool_uses_20250919' }]), HEADERS);
    expect(r.status).toBe(200);
    expect(ant.last().body.context_management).toEqual({ edits: [{ type: 'clear_tool_uses_20250919' }] });
  });
});
