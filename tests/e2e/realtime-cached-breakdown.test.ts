/**
 * A realtime report's cached-input breakdown (`input_token_details.cached_tokens_details`) is a split of its
 * `cached_tokens`. An upstream whose two disagree was billed by the breakdown's sum for what left the text and audio
 * counts and by cached_tokens for the cache reads: a breakdown of 100 cached text tokens beside `cached_tokens: 0`
 * billed those 100 input tokens as nothing, and `cached_tokens: 100` beside a breakdown of none billed them twice.
 * Over a real WebSocket to a real gateway.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, type TestGateway } from '../helpers/gateway';
import { startRealtimeGateway } from '../helpers/realtime-gateway';
import { RealtimeTestClient, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';

const PRICE = { model: 'gpt-realtime', input: 4_000_000, output: 16_000_000, cache_read: 400_000, cache_write: 0, audio_input: 32_000_000, audio_output: 64_000_000, context_window: 16_000 };
let gw: TestGateway;
let up: RealtimeUpstreamDouble;

beforeAll(async () => {
  ({ gw, up } = await startRealtimeGateway({}, PRICE));
}, 30_000);
afterAll(async () => {
  await gw.stop();
  await up.stop();
});

const out = { text_tokens: 2, audio_tokens: 0 };
const cases: Array<[string, Record<string, unknown>, { input: number; audio: number; cached: number }]> = [
  ['a breakdown of 100 cached text tokens beside cached_tokens 0: the input is not free',
    { text_tokens: 100, audio_tokens: 0, cached_tokens: 0, cached_tokens_details: { text_tokens: 100, audio_tokens: 0 } }, { input: 100, audio: 0, cached: 0 }],
  ['cached_tokens 100 beside a breakdown of none: not billed twice (as text and as cache reads)',
    { text_tokens: 100, audio_tokens: 0, cached_tokens: 100, cached_tokens_details: { text_tokens: 0, audio_tokens: 0 } }, { input: 0, audio: 0, cached: 100 }],
  ['a breakdown naming more audio than cached_tokens: only cached_tokens leave the counts',
    { text_tokens: 40, audio_tokens: 60, cached_tokens: 30, cached_tokens_details: { text_tokens: 0, audio_tokens: 60 } }, { input: 40, audio: 30, cached: 30 }],
  ['a breakdown that agrees (OpenAI\'s own report): as split',
    { text_tokens: 80, audio_tokens: 320, cached_tokens: 256, cached_tokens_details: { text_tokens: 64, audio_tokens: 192 } }, { input: 16, audio: 128, cached: 256 }],
];

for (const [label, details, want] of cases) {
  test(label, async () => {
    const u = await makeUser(gw);
    await gw.services.ledger.apply({ userId: u.id, kind: 'topup', amount: 1_000_000_000, ref: `seed-${u.id}`, at: 1 });
    const key = (await gw.api('POST', '/api/token/', { name: 'rt' }, u.token)).body.data.key;
    const inputTotal = (details.text_tokens as number) + (details.audio_tokens as number);
    up.usageFor = () => ({ total_tokens: inputTotal + 2, input_tokens: inputTotal, output_tokens: 2, input_token_details: details, output_token_details: out }) as any;
    const c = new RealtimeTestClient(`${gw.url.replace(/^http/, 'ws')}/v1/realtime?model=gpt-realtime`, { headers: { authorization: `Bearer ${key}` } });
    try {
      await c.opened;
      await c.waitFor('session.created');
      c.ws.send('{"type":"response.create","response":{"output_modalities":["text"]}}');
      await c.waitFor('response.done');
      let row: any;
      for (let i = 0; i < 200 && !row; i++) {
        row = await gw.db.get("select input_tokens, audio_input_tokens, cache_read_tokens, cost from usage_logs where user_id = ? and kind = 'realtime'", u.id);
        if (!row) await Bun.sleep(20);
      }
      expect({ input: row.input_tokens, audio: row.audio_input_tokens, cached: row.cache_read_tokens }).toEqual(want);
      // Priced as billed: text input, audio input and cache reads at their own prices, plus 2 text output tokens.
      const micro = want.input * PRICE.input + want.audio * PRICE.audio_input + want.cached * PRICE.cache_read + 2 * PRICE.output;
      expect(row.cost).toBe(Math.ceil(micro / 1_000_000));
    } finally {
      c.ws.close();
    }
  }, 20_000);
}
