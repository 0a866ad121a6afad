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
  /**
   * Cached tokens the cached breakdown took out of the text and audio counts: what an unusable `cached_tokens`
   * leaves unbilled (without a usable breakdown nothing is taken out, and the cached tokens bill as text or audio).
   */
  cachedMoved: number;
  /** All input tokens (cached included) and all output tokens, as reported. */
  inputTotal: number;
  outputTotal: number;
  /** Whether the report splits input (`input_token_details`) and output (`output_token_details`) by kind; without a split, the total is in textIn/textOut. */
  inputSplit: boolean;
  outputSplit: boolean;
  /** An output breakdown that leaves the audio count out (audioOut is then 0). */
  audioOutAbsent: boolean;
}

/** The price fields a realtime response needs (quota units per million tokens). */
export interface RealtimePrice {
  input: number;
  output: number;
  cacheRead: number;
  audioInput: number;
  audioOutput: number;
  /** Context window of the model (null/absent: the billing default). */
  contextWindow?: number | null;
}

/**
 * Absent = 0, except a main total (undefined: billed on the estimate, flagged `estimated`, never as 0); a
 * number as reported (billing validates it); anything else NaN. Nothing is rounded or zeroed here, so a
 * hostile count reaches billing's single check and is flagged there, not billed as 0.
 */
export const ok = (v: number) => Number.isSafeInteger(v) && v >= 0;
const n = (v: unknown, main = false): number =>
  (v === undefined ? (main ? (undefined as unknown as number) : 0) : v === null && !main ? 0 : typeof v === 'number' ? v : Number.NaN);
/** Details that name at least one count: an empty details object says nothing and does not stand for the total. */
const counted = (d: any, keys: string[]): boolean => !!d && typeof d === 'object' && keys.some((k) => d[k] !== undefined);

/**
 * Splits a usage object. Cached tokens are a subset of input tokens: when the cached breakdown is
 * missing they are taken from text first, then audio, so no token is billed twice. Image tokens are
 * billed as text input. Missing details fall back to the totals (all text).
 */
export function tokensOf(usage: any): RealtimeTokens {
  const inD = counted(usage?.input_token_details, ['text_tokens', 'image_tokens', 'audio_tokens']) ? usage.input_token_details : undefined;
  const outD = counted(usage?.output_token_details, ['text_tokens', 'audio_tokens']) ? usage.output_token_details : undefined;
  // A null total is unusable (a null detail just means none of that kind).
  const inputTotal = n(usage?.input_tokens, true);
  const outputTotal = n(usage?.output_tokens, true);
  let textIn = inD ? n(inD.text_tokens) + n(inD.image_tokens) : inputTotal;
  let audioIn = inD ? n(inD.audio_tokens) : 0;
  // Cached tokens are part of the input. More of them than the whole input cannot be true: the count is unusable
  // (billing flags it `invalid`) and its breakdown moves nothing, so the input bills at its own prices; cut to the
  // input (before), it billed the whole input at the cache-read price, the cheapest reading, as translated answers did.
  // (Cached counts are read even beside details that name no other count: then they come out of the total.)
  const rawIn = usage?.input_token_details;
  const rawCached = rawIn && typeof rawIn === 'object' ? n(rawIn.cached_tokens) : 0;
  const cachedBad = ok(inputTotal) && ok(rawCached) && rawCached > inputTotal;
  const cachedIn = cachedBad ? Number.NaN : rawCached;
  // The split only moves valid counts; an invalid one is left as is for billing to flag and replace.
  const cd = cachedBad ? undefined : inD?.cached_tokens_details;
  let cachedMoved = 0;
  if (cd) {
    const cText = n(cd.text_tokens) + n(cd.image_tokens);
    const cAudio = n(cd.audio_tokens);
    let fromText = ok(textIn) && ok(cText) ? Math.min(textIn, cText) : 0;
    let fromAudio = ok(audioIn) && ok(cAudio) ? Math.min(audioIn, cAudio) : 0;
    if (ok(cachedIn)) {
      // The breakdown is a split of cached_tokens: it moves exactly that many, whatever its own sum says. Moving more
      // (`cached_tokens: 0` beside a breakdown of 100 text tokens) billed those 100 input tokens as nothing; moving
      // less (`cached_tokens: 100` beside a breakdown of 0) billed them twice, as text and as cache reads. The rest
      // comes from text first, then audio, as without a breakdown.
      fromText = Math.min(fromText, cachedIn);
      fromAudio = Math.min(fromAudio, cachedIn - fromText);
      let rest = cachedIn - fromText - fromAudio;
      if (ok(textIn)) { const t = Math.min(textIn - fromText, rest); fromText += t; rest -= t; }
      if (ok(audioIn)) fromAudio += Math.min(audioIn - fromAudio, rest);
    }
    textIn -= fromText;
    audioIn -= fromAudio;
    cachedMoved = fromText + fromAudio;
  } else if (ok(textIn) && ok(audioIn) && ok(cachedIn)) {
    const fromText = Math.min(textIn, cachedIn);
    textIn -= fromText;
    audioIn -= Math.min(audioIn, cachedIn - fromText);
  }
  const textOut = outD ? n(outD.text_tokens) : outputTotal;
  const audioOut = outD ? n(outD.audio_tokens) : 0;
  return { textIn, audioIn, cachedIn, cachedMoved, textOut, audioOut, inputTotal, outputTotal, inputSplit: !!inD, outputSplit: !!outD, audioOutAbsent: !!outD && outD.audio_tokens === undefined };
}

/** Exact integer cost (rounded up once over the whole response). */
export function priceTokens(t: RealtimeTokens, p: RealtimePrice): number {
  return costOf([
    [t.textIn, p.input], [t.audioIn, p.audioInput], [t.cachedIn, p.cacheRead],
    [t.textOut, p.output], [t.audioOut, p.audioOutput],
  ]);
}

/**
 * The amount held before a response starts: what the session's context can cost (the whole context
 * window at the dearest input price: a response re-reads the conversation) plus its max output tokens at
 * the dearest output price.
 */
export function reservationFor(contextTokens: number, outputTokens: number, p: RealtimePrice, ratio?: number): number {
  return costOf([[contextTokens, Math.max(p.input, p.audioInput, p.cacheRead)], [outputTokens, Math.max(p.output, p.audioOutput)]], ratio);
}
