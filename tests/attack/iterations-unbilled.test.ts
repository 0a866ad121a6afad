/**
 * Work Anthropic bills inside one request but reports only in `usage.iterations`, outside the top-level counts
 * the gateway bills, is refused before anything is held or sent, on every channel type, over real HTTP:
 * - server-side compaction (`context_management.edits: [{type: "compact_20260112", …}]`, beta
 *   `compact-2026-01-12`): a sampling step reading the whole conversation (the trigger goes down to 50,000 input
 *   tokens); the double's compaction, Anthropic's example, reads 180,000 tokens and writes 3,500;
 * - the advisor tool (`advisor_20260301`, beta `advisor-tool-2026-03-01`): the tool's model (Opus, on a request
 *   for Haiku or Sonnet) reads the transcript at its own prices; the double's call reads 40,000 and writes 1,600.
 * Before, both were relayed and billed their top-level counts only.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let ant: Scripted;
let oai: Scripted;
let user: Awaited<ReturnType<typeof keyedUser>>;
const BALANCE = 100_000_000;
const HEADERS = { 'vendor-version': '2023-06-01', 'anthropic-beta': 'compact-2026-01-12,advisor-tool-2026-03-01' };
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

describe('work billed outside the usage counts', () => {
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

  for (const model of ['native', 'translated']) {
    for (const type of ['advisor_20260301', ' Advisor_20990101']) {
      test(`${model}, "${type}" tool: 400 unsupported_tool naming it; nothing sent, nothing charged`, async () => {
        const hits = ant.hits + oai.hits;
        const before = await balance();
        const tools = [{ name: 'lookup', input_schema: { type: 'object' } }, { type, name: 'advisor', model: 'claude-opus-4-6' }];
        const r = await send(gw, user.key, { model, max_tokens: 50, messages: [{ role: 'user', content: 'Hi' }], tools }, HEADERS);
        expect(r.status).toBe(400);
        expect(r.body.error).toMatchObject({ code: 'unsupported_tool', param: 'tools.1' });
        expect(ant.hits + oai.hits).toBe(hits);
        expect(await balance()).toBe(before);
      });
    }
  }

  test('other context-management edits (clearing tool results or thinking) still pass', async () => {
    const r = await send(gw, user.key, body('native', [{ type: 'clear_tool_uses_20250919' }]), HEADERS);
    expect(r.status).toBe(200);
    expect(ant.last().body.context_management).toEqual({ edits: [{ type: 'clear_tool_uses_20250919' }] });
  });
});
