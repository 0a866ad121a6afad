/**
 * Realtime usage (`response.done` → `response.usage`) as billable token counts, and its price.
 */
import { costOf } from '@gw/core';

/** Token counts of one response, split the way they are priced. */
export interface RealtimeTokens {
  /** Uncached text (and image) input tokens: `input` price. */
  textIn: number;
  /** Uncached audio input tokens: `audioInput` price. */
  audioIn: number;
  /** Cached input tokens of any modality: `cacheRead` price. */
  cachedIn: number;
  /** Text output tokens: `output` price. */
  textOut: number;
  /** Audio output tokens: `audioOutput` price. */
  audioOut: number;
  /** All input tokens (cached included) and all output tokens, as reported. */
  inputTotal: number;
  outputTotal: number;
}

/** The price fields a realtime response needs (quota units per million tokens). */
export interface RealtimePrice {
  input: number;
  output: number;
  cacheRead: number;
  audioInput: number;
  audioOutput: number;
}

const n = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? Math.floor(v) : 0);

/**
 * Splits a usage object. Cached tokens are a subset of input tokens: when the cached breakdown is
 * missing they are taken from text first, then audio, so no token is billed twice. Image tokens are
 * billed as text input. Missing details fall back to the totals (all text).
 */
export function tokensOf(usage: any): RealtimeTokens {
  const inD = usage?.input_token_details;
  const outD = usage?.output_token_details;
  const inputTotal = n(usage?.input_tokens);
  const outputTotal = n(usage?.output_tokens);
  let textIn = inD ? n(inD.text_tokens) + n(inD.image_tokens) : inputTotal;
  let audioIn = inD ? n(inD.audio_tokens) : 0;
  const cachedIn = inD ? n(inD.cached_tokens) : 0;
  const cd = inD?.cached_tokens_details;
  if (cd) {
    textIn -= Math.min(textIn, n(cd.text_tokens) + n(cd.image_tokens));
    audioIn -= Math.min(audioIn, n(cd.audio_tokens));
  } else {
    const fromText = Math.min(textIn, cachedIn);
    textIn -= fromText;
    audioIn -= Math.min(audioIn, cachedIn - fromText);
  }
  const textOut = outD ? n(outD.text_tokens) : outputTotal;
  const audioOut = outD ? n(outD.audio_tokens) : 0;
  return { textIn, audioIn, cachedIn, textOut, audioOut, inputTotal, outputTotal };
}

/** Exact integer cost (rounded up once over the whole response). */
export function priceTokens(t: RealtimeTokens, p: RealtimePrice): number {
  return costOf([
    [t.textIn, p.input], [t.audioIn, p.audioInput], [t.cachedIn, p.cacheRead],
    [t.textOut, p.output], [t.audioOut, p.audioOutput],
  ]);
}

/** The amount held before a response starts: `tokens` at the dearest output price. */
export function reservationFor(tokens: number, p: RealtimePrice): number {
  return costOf([[tokens, Math.max(p.output, p.audioOutput, p.input, p.audioInput)]]);
}
