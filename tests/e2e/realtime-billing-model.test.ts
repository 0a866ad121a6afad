/** A channel's billing_model on /v1/realtime: each response is billed at the upstream model's price when the channel says so. */
import { describe, expect, test } from 'bun:test';
import { costOf } from '@gw/core';
import { PRICE, SAMPLE_COST, realtimeSuite, respondOnce, w } from '../helpers/realtime-wiring';

realtimeSuite();

// The upstream model (gpt-realtime-2025, the channel's mapping target) at twice every price of the requested one.
const UP = { ...PRICE, model: 'gpt-realtime-2025', input: 8_000_000, output: 32_000_000, cache_read: 800_000, audio_input: 64_000_000, audio_output: 128_000_000 };
const UP_COST = costOf([[80 - 64, UP.input], [320 - 192, UP.audio_input], [256, UP.cache_read], [30, UP.output], [82, UP.audio_output]]);

async function oneResponse(): Promise<any> {
  const userId = await respondOnce();
  const row = w.h.sqlite.query('select model, upstream_model, billed_model, cost from usage_logs where user_id = ?').get(userId) as any;
  expect(w.quota.balance(userId)).toBe(5_000_000 - row.cost);
  return row;
}

describe('realtime billing model', () => {
  test('requested (default) bills the requested model; upstream the mapped one while it has a price', async () => {
    expect(UP_COST).toBeGreaterThan(SAMPLE_COST); // one rounding over all kinds: not exactly twice
    expect(await oneResponse()).toEqual({ model: 'gpt-realtime', upstream_model: 'gpt-realtime-2025', billed_model: 'gpt-realtime', cost: SAMPLE_COST });
    w.channels[0]!.billingModel = 'upstream';
    try {
      // No price for the upstream model yet: the requested one's applies, and the row says so.
      expect((await oneResponse()).billed_model).toBe('gpt-realtime');
      w.book.upsert(UP);
      expect(await oneResponse()).toEqual({ model: 'gpt-realtime', upstream_model: 'gpt-realtime-2025', billed_model: 'gpt-realtime-2025', cost: UP_COST });
    } finally {
      w.channels[0]!.billingModel = 'requested';
    }
  });
});
