import { describe, expect, test } from 'bun:test';
import { responseUsage } from './billed-usage';
import { tokensOf } from './usage';

const P = { input: 4_000_000, output: 16_000_000, cacheRead: 400_000, audioInput: 32_000_000, audioOutput: 64_000_000 };
const HELD = { text: 2000, audio: 300, either: 0, known: true };
const delivered = { output: 7, audioOutput: 20 };
const GUESS = { input: 1500, audioInput: 300 };
const of = (usage: unknown, d = delivered, held = HELD, price = P) => responseUsage(tokensOf(usage), d, 32_000, held, price, () => GUESS);

describe('responseUsage', () => {
  test('a split report bills as reported', () => {
    const u = { input_tokens: 100, output_tokens: 30, input_token_details: { text_tokens: 60, audio_tokens: 40 }, output_token_details: { text_tokens: 10, audio_tokens: 20 } };
    expect(of(u)).toMatchObject({ usage: { input: 60, audioInput: 40, output: 10, audioOutput: 20 }, estimated: false });
  });

  test('an unusable audio output count falls back to the rest of a usable total, at least what was delivered', () => {
    for (const bad of [-5, 1.5, '7', 1e308, 2 ** 53 + 2, null]) {
      const r = of({ input_tokens: 1, output_tokens: 105, input_token_details: { text_tokens: 1 }, output_token_details: { text_tokens: 5, audio_tokens: bad } });
      if (bad !== null) expect(r.estimate.audioOutput).toBe(100);
    }
    // The rest below the audio delivered: the delivered estimate.
    expect(of({ input_tokens: 1, output_tokens: 10, output_token_details: { text_tokens: 5, audio_tokens: -1 } }).estimate.audioOutput).toBe(20);
    // The total unusable too: the delivered estimate (as before).
    expect(of({ input_tokens: 1, output_tokens: 'x', output_token_details: { text_tokens: 5, audio_tokens: -1 } }).estimate.audioOutput).toBe(20);
    // The text count unusable as well: the rest once the text delivered is out.
    expect(of({ input_tokens: 1, output_tokens: 105, output_token_details: { text_tokens: -1, audio_tokens: -1 } }).estimate).toMatchObject({ output: 7, audioOutput: 98 });
  });

  test('a breakdown leaving the audio out while audio was delivered: the rest of the total, at least the audio delivered', () => {
    expect(of({ input_tokens: 1, output_tokens: 105, input_token_details: { text_tokens: 1 }, output_token_details: { text_tokens: 5 } })).toMatchObject({ usage: { output: 5, audioOutput: 100 }, estimated: true });
    expect(of({ input_tokens: 1, output_tokens: 5, input_token_details: { text_tokens: 1 }, output_token_details: { text_tokens: 5 } })).toMatchObject({ usage: { output: 5, audioOutput: 20 }, estimated: true });
    expect(of({ input_tokens: 1, output_tokens: 105, input_token_details: { text_tokens: 1 }, output_token_details: { text_tokens: 5 } }, { output: 7, audioOutput: 0 })).toMatchObject({ usage: { output: 5, audioOutput: 0 }, estimated: false });
  });

  test('no output breakdown: the audio delivered is audio, the rest text; flagged estimated only when it moved something', () => {
    expect(of({ input_tokens: 1, output_tokens: 105, input_token_details: { text_tokens: 1 } })).toMatchObject({ usage: { output: 85, audioOutput: 20 }, estimated: true });
    expect(of({ input_tokens: 1, output_tokens: 5, input_token_details: { text_tokens: 1 } })).toMatchObject({ usage: { output: 0, audioOutput: 5 } });
    expect(of({ input_tokens: 1, output_tokens: 105, input_token_details: { text_tokens: 1 } }, { output: 7, audioOutput: 0 })).toMatchObject({ usage: { output: 105, audioOutput: 0 }, estimated: false });
    // An unusable total: the text delivered replaces it, the audio delivered bills as audio.
    expect(of({ input_tokens: 1, output_tokens: -1, input_token_details: { text_tokens: 1 } })).toMatchObject({ usage: { audioOutput: 20 }, estimate: { output: 7 } });
  });

  test('no input breakdown: as much as the conversation holds as audio bills as audio, when audio is dearer; an unknown bound: all of it', () => {
    expect(of({ input_tokens: 500, output_tokens: 0, output_token_details: { text_tokens: 0, audio_tokens: 0 } })).toMatchObject({ usage: { input: 200, audioInput: 300 }, estimated: true });
    expect(of({ input_tokens: 100, output_tokens: 0, output_token_details: { text_tokens: 0, audio_tokens: 0 } })).toMatchObject({ usage: { input: 0, audioInput: 100 } });
    expect(of({ input_tokens: 500, output_tokens: 0, output_token_details: { text_tokens: 0, audio_tokens: 0 } }, delivered, { ...HELD, known: false })).toMatchObject({ usage: { input: 0, audioInput: 500 } });
    // Cached tokens come out first; text dearer than audio: all as text, as before.
    expect(of({ input_tokens: 500, output_tokens: 0, input_token_details: { cached_tokens: 400 }, output_token_details: { text_tokens: 0, audio_tokens: 0 } })).toMatchObject({ usage: { input: 0, audioInput: 100, cacheRead: 400 } });
    expect(of({ input_tokens: 500, output_tokens: 0, output_token_details: { text_tokens: 0, audio_tokens: 0 } }, delivered, HELD, { ...P, audioInput: 1 })).toMatchObject({ usage: { input: 500, audioInput: 0 }, estimated: false });
    // Nothing audio in the conversation: unchanged.
    expect(of({ input_tokens: 500, output_tokens: 0, output_token_details: { text_tokens: 0, audio_tokens: 0 } }, delivered, { ...HELD, audio: 0 })).toMatchObject({ usage: { input: 500, audioInput: 0 }, estimated: false });
  });

  test('no input count at all: the conversation\'s estimate, flagged estimated', () => {
    expect(of({ output_tokens: 0, output_token_details: { text_tokens: 0, audio_tokens: 0 } })).toMatchObject({ usage: { input: 1500, audioInput: 300 }, estimated: true });
    expect(of({})).toMatchObject({ usage: { input: 1500, audioInput: 300 }, estimated: true });
    // Details naming counts stand for the total.
    expect(of({ output_tokens: 0, input_token_details: { text_tokens: 5, audio_tokens: 0 }, output_token_details: { text_tokens: 0, audio_tokens: 0 } })).toMatchObject({ usage: { input: 5, audioInput: 0 }, estimated: false });
  });
});
