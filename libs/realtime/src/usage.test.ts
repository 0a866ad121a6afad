import { describe, expect, test } from 'bun:test';
import { costOf } from '@gw/core';
import { priceTokens, reservationFor, tokensOf } from './usage';

const P = { input: 4_000_000, output: 16_000_000, cacheRead: 400_000, audioInput: 32_000_000, audioOutput: 64_000_000 };

describe('tokensOf', () => {
  test('the Realtime API reference example: cached tokens come out of their own modality', () => {
    const t = tokensOf({
      total_tokens: 512, input_tokens: 400, output_tokens: 112,
      input_token_details: { text_tokens: 80, audio_tokens: 320, image_tokens: 0, cached_tokens: 256, cached_tokens_details: { text_tokens: 64, audio_tokens: 192, image_tokens: 0 } },
      output_token_details: { text_tokens: 30, audio_tokens: 82 },
    });
    expect(t).toEqual({ textIn: 16, audioIn: 128, cachedIn: 256, cachedMoved: 256, textOut: 30, audioOut: 82, inputTotal: 400, outputTotal: 112, inputSplit: true, outputSplit: true, audioOutAbsent: false });
  });

  test('no cached breakdown: cached taken from text first, then audio; never negative', () => {
    const t = tokensOf({ input_tokens: 100, output_tokens: 0, input_token_details: { text_tokens: 10, audio_tokens: 90, cached_tokens: 30 } });
    expect([t.textIn, t.audioIn, t.cachedIn]).toEqual([0, 70, 30]);
  });

  test('no details at all: totals as text; garbage stays visible (not 0) for billing to flag and replace', () => {
    expect(tokensOf({ input_tokens: 7, output_tokens: 3 })).toMatchObject({ textIn: 7, audioIn: 0, cachedIn: 0, textOut: 3, audioOut: 0 });
    // A total left out is not 0: it stays undefined, billed on the estimate (flagged estimated).
    expect(tokensOf(null)).toMatchObject({ textIn: undefined, textOut: undefined });
    expect(tokensOf({})).toMatchObject({ textIn: undefined, textOut: undefined, audioIn: 0, audioOut: 0, cachedIn: 0 });
    expect(tokensOf({ input_tokens: 100, output_token_details: {} })).toMatchObject({ textIn: 100, textOut: undefined, audioOut: 0 });
    // Cached tokens beside details naming no other count come out of the total.
    expect(tokensOf({ input_tokens: 100, output_tokens: 2, input_token_details: { cached_tokens: 40 } })).toMatchObject({ textIn: 60, cachedIn: 40 });
    const bad = tokensOf({ input_tokens: -5, output_tokens: '9' });
    expect(bad.textIn).toBe(-5);
    expect(bad.textOut).toBeNaN();
  });

  test('cached tokens beyond the input total are unusable (billing flags and replaces them); the input stays text', () => {
    const t = tokensOf({ input_tokens: 10, output_tokens: 0, input_token_details: { text_tokens: 10, cached_tokens: 5000 } });
    expect([Number.isNaN(t.cachedIn), t.textIn, t.cachedMoved]).toEqual([true, 10, 0]);
  });
});

test('priceTokens is costOf over every kind, rounded up once', () => {
  const t = { textIn: 16, audioIn: 128, cachedIn: 256, cachedMoved: 256, textOut: 30, audioOut: 82, inputTotal: 400, outputTotal: 112, inputSplit: true, outputSplit: true, audioOutAbsent: false };
  expect(priceTokens(t, P)).toBe(costOf([[16, P.input], [128, P.audioInput], [256, P.cacheRead], [30, P.output], [82, P.audioOutput]]));
  expect(priceTokens(t, P)).toBe(9991); // 64 + 4096 + 102.4 + 480 + 5248, rounded up
});

test('reservationFor: context at the dearest input price + output at the dearest output price', () => {
  expect(reservationFor(0, 1000, P)).toBe(1000 * Math.max(P.output, P.audioOutput) / 1_000_000);
  expect(reservationFor(1000, 0, P)).toBe(1000 * Math.max(P.input, P.audioInput, P.cacheRead) / 1_000_000);
  expect(reservationFor(0, 0, P)).toBe(0);
});
