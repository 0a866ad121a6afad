/**
 * Exact metering against a hostile or quirky upstream: the usage it reports in several places is folded into what is
 * billed so that its choice of order cannot lower the bill (README: Metering, "Usage folding").
 * - Translated streams (OpenAI chunks → Anthropic SSE) with several `usage` chunks: each count bills its highest report;
 *   the prompt is one total (prompt_tokens, cached included), and with the same total the report with fewer cache reads
 *   wins. Before, the last chunk won: 5,000 output tokens then 6 billed 6; a 1,000-token prompt re-reported as all
 *   cached billed no regular input.
 * - Native usage with the cache-write TTL split (cache_creation.ephemeral_5m/1h_input_tokens) and no total (absent or
 *   0): the writes are the split's sum. Before, they were billed as none (11 input tokens billed, 3,600 writes free).
 * Real HTTP, the repo's upstream doubles scripted with raw frames; the usage row and the user's balance are checked.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, balanceOf, keyedUser, send, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let ant: Scripted;
let oai: Scripted;
let user: Awaited<ReturnType<typeof keyedUser>>;
const TOPUP = 1_000_000_000;
// Per million tokens: input 1 a token, output 2, cache reads 0.1, 5-minute writes 1.25, 1-hour writes 2.
const PRICE = { input: 1_000_000, output: 2_000_000, cache_read: 100_000, cache_write: 1_250_000, cache_write_1h: 2_000_000, context_window: 200_000 };
const REPLY = 'Hello there, this is a reply';

beforeAll(async () => {
  gw = await startGateway();
  ant = upstream('anthropic');
  oai = upstream('openai');
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['ant'] });
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['oai'] });
  for (const model of ['ant', 'oai']) expect((await gw.api('PUT', '/api/pricing/', { model, ...PRICE })).status).toBe(200);
  user = await keyedUser(gw, TOPUP);
});
afterAll(async () => { await ant.stop(); await oai.stop(); await gw.stop(); });

/** Independent of the gateway's code: Σ tokens × price per million, rounded up once. */
const costOf = (parts: Array<[number, number]>) => Number((parts.reduce((s, [n, p]) => s + BigInt(n) * BigInt(p), 0n) + 999_999n) / 1_000_000n);

const logOf = (id: string) => gw.db.get('select * from usage_logs where request_id = ?', id) as Promise<any>;

async function billed(model: 'ant' | 'oai', stream: boolean) {
  const r = await send(gw, user.key, { model, max_tokens: 8000, stream, messages: [{ role: 'user', content: 'Say hello' }] });
  expect(r.status).toBe(200);
  return logOf(r.headers.get('request-id')!);
}

describe('translated stream: several usage chunks are folded so that the order cannot lower the bill', () => {
  const chunk = (o: object) => `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', ...o })}\n\n`;
  /** The reply, its finish, then one usage chunk per report, in the order given. */
  const reports = (...usages: object[]) => ({
    rawFrames: [
      chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: REPLY }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }),
      ...usages.map((usage) => chunk({ choices: [], usage })),
      'data: [DONE]\n\n',
    ],
  });
  const cases: Array<{ name: string; usages: object[]; row: { input: number; output: number; read: number } }> = [
    { name: 'a big output report then a small one: the big one (was 6)',
      usages: [{ prompt_tokens: 10, completion_tokens: 5000 }, { prompt_tokens: 10, completion_tokens: 6 }], row: { input: 10, output: 5000, read: 0 } },
    { name: 'a small output report then a big one: the big one',
      usages: [{ prompt_tokens: 10, completion_tokens: 6 }, { prompt_tokens: 10, completion_tokens: 5000 }], row: { input: 10, output: 5000, read: 0 } },
    { name: 'a 1,000-token prompt re-reported as all cached: 1,000 regular input (was 0)',
      usages: [{ prompt_tokens: 1000, completion_tokens: 5 }, { prompt_tokens: 1000, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 1000 } }],
      row: { input: 1000, output: 5, read: 0 } },
    { name: 'the same prompt first all cached, then uncached: the uncached report',
      usages: [{ prompt_tokens: 1000, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 1000 } }, { prompt_tokens: 1000, completion_tokens: 5 }],
      row: { input: 1000, output: 5, read: 0 } },
    { name: 'a bigger prompt total then a smaller uncached one: the bigger total, its cache reads as reported (was 100 input)',
      usages: [{ prompt_tokens: 900, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 850 } }, { prompt_tokens: 100, completion_tokens: 5 }],
      row: { input: 50, output: 5, read: 850 } },
    { name: 'a usable output report then an unusable one: the usable one',
      usages: [{ prompt_tokens: 10, completion_tokens: 5000 }, { prompt_tokens: 10, completion_tokens: -1 }], row: { input: 10, output: 5000, read: 0 } },
  ];
  for (const c of cases) {
    test(c.name, async () => {
      oai.queue.push(reports(...c.usages));
      const before = await balanceOf(gw, user.id);
      const row = await billed('oai', true);
      expect(row).toMatchObject({ input_tokens: c.row.input, output_tokens: c.row.output, cache_read_tokens: c.row.read, cache_write_tokens: 0, usage_flag: '' });
      const cost = costOf([[c.row.input, PRICE.input], [c.row.output, PRICE.output], [c.row.read, PRICE.cache_read]]);
      expect(row.cost).toBe(cost);
      gw.services.relay.quota.flush?.();
      expect(before - (await balanceOf(gw, user.id))).toBe(cost);
    });
  }
});

describe('native usage: a cache-write split without a total bills the split', () => {
  const LONG_REPLY = 'x'.repeat(1500); // past json-pass's PASS_MIN_BYTES: the answer passes as bytes
  const usageJson = (total: string | null, extra = '') =>
    `{"input_tokens":11,"output_tokens":5,${total === null ? '' : `"cache_creation_input_tokens":${total},`}"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":1000,"ephemeral_1h_input_tokens":2600}${extra}}`;
  const json = (usage: string, text = REPLY) => () => new Response(
    `{"id":"msg_f","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"${text}"}],"stop_reason":"end_turn","stop_sequence":null,"usage":${usage}}`,
    { headers: { 'content-type': 'application/json' } });
  /** Anthropic sends the cache counts in message_start; a later message_delta here sends a split of zeros too. */
  const sse = (usage: string, lowered: boolean) => () => new Response([
    `event: message_start\ndata: {"type":"message_start","message":{"id":"msg_f","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":${usage}}}\n\n`,
    'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
    `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"${REPLY}"}}\n\n`,
    'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
    `event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5${lowered ? ',"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0}' : ''}}}\n\n`,
    'event: message_stop\ndata: {"type":"message_stop"}\n\n',
  ].join(''), { headers: { 'content-type': 'text/event-stream' } });

  const SPLIT = { writes: 3600, oneHour: 2600, cost: costOf([[11, PRICE.input], [5, PRICE.output], [1000, PRICE.cache_write], [2600, PRICE.cache_write_1h]]) };
  const cases: Array<{ name: string; stream: boolean; response: () => () => Response; row: { writes: number; oneHour: number; cost: number; flag?: string } }> = [
    { name: 'JSON, total absent: 3,600 writes (was 0)', stream: false, response: () => json(usageJson(null)), row: SPLIT },
    { name: 'JSON, total 0: 3,600 writes (was 0)', stream: false, response: () => json(usageJson('0')), row: SPLIT },
    { name: 'JSON passed as bytes, total 0: 3,600 writes (was 0)', stream: false, response: () => json(usageJson('0'), LONG_REPLY), row: SPLIT },
    { name: 'SSE, total absent: 3,600 writes (was 0)', stream: true, response: () => sse(usageJson(null), false), row: SPLIT },
    { name: 'SSE, total 0, the split lowered to zeros by message_delta: 3,600 writes (was 0)', stream: true, response: () => sse(usageJson('0'), true), row: SPLIT },
    { name: 'JSON, total 3,600 as Anthropic sends it: unchanged', stream: false, response: () => json(usageJson('3600')), row: SPLIT },
    { name: 'JSON, a total above 0 below the split stands (1-hour part cut to it, as before)', stream: false, response: () => json(usageJson('100')),
      row: { writes: 100, oneHour: 100, cost: costOf([[11, PRICE.input], [5, PRICE.output], [100, PRICE.cache_write_1h]]), flag: 'implausible' } },
  ];
  for (const c of cases) {
    test(c.name, async () => {
      ant.queue.push({ response: c.response() });
      const before = await balanceOf(gw, user.id);
      const row = await billed('ant', c.stream);
      expect(row).toMatchObject({ input_tokens: 11, output_tokens: 5, cache_write_tokens: c.row.writes, cache_write_1h_tokens: c.row.oneHour, usage_flag: c.row.flag ?? '' });
      expect(row.cost).toBe(c.row.cost);
      gw.services.relay.quota.flush?.();
      expect(before - (await balanceOf(gw, user.id))).toBe(c.row.cost);
    });
  }
});

test('balance == Σ ledger == top-up − Σ billed rows after all of it', async () => {
  gw.services.relay.quota.flush?.();
  const rows = await gw.db.all('select cost from usage_logs where user_id = ?', user.id) as Array<{ cost: number }>;
  const balance = (await gw.services.users.byId(user.id))!.quota;
  expect(await gw.services.ledger.sum(user.id)).toBe(balance);
  expect(balance).toBe(TOPUP - rows.reduce((s, r) => s + Number(r.cost), 0));
});
