/**
 * A response.done's usage as it is billed: the counts, and what billing replaces an unusable one by (QuotaService
 * takes each count that is not a non-negative safe integer from `estimate`, flagged `invalid`). Nothing unusable
 * is billed as 0 while the upstream billed it: a count is replaced by the rest of its usable total, never less than
 * what the relay saw delivered; a total the report gives without splitting it by kind is split, dearer kind first,
 * up to what the session can hold of that kind (flagged `estimated`), instead of billing it all at the text price.
 */
import type { ContextTokens } from './context';
import type { DeliveredTokens } from './delivered';
import { ok, type RealtimePrice, type RealtimeTokens } from './usage';

export interface BilledUsage {
  usage: { input: number; output: number; cacheRead: number; cacheWrite: number; audioInput: number; audioOutput: number };
  estimate: { output: number; audioOutput: number; audioInput: number; cacheRead: number };
  /** The gateway split a total the report did not split. */
  estimated: boolean;
}

/**
 * `inputBound`: what an unusable audio input count is replaced by (the reported input total, else the hold's bound);
 * `conversation`: what the session's conversation can hold of each kind (context.ts), the bound of an unsplit input's audio part;
 * `guess`: the input a response can have read (context.ts's estimate), for a report without any input count.
 */
export function responseUsage(t: RealtimeTokens, delivered: DeliveredTokens, inputBound: number, conversation: ContextTokens, price: RealtimePrice,
  guess: () => { input: number; audioInput: number }): BilledUsage {
  let { textIn, audioIn, textOut, audioOut } = t;
  let estimated = false;
  if (!t.inputSplit && t.inputTotal === undefined) {
    // No input count at all: what the conversation can have held, dearer kind first, as for a cut response (before:
    // the whole context window at the text price, the audio billed as none).
    ({ input: textIn, audioInput: audioIn } = guess());
    estimated = true;
  } else if (!t.inputSplit && ok(textIn) && textIn > 0 && price.audioInput > price.input) {
    // No input breakdown: as much of the (uncached) total as the conversation can hold as audio bills as audio, the
    // rest as text (before: all as text, an eighth of gpt-realtime's audio input price). An unknown bound: all of it.
    const audio = conversation.known ? Math.min(textIn, conversation.audio + conversation.either) : textIn;
    if (audio > 0) {
      audioIn = audio;
      textIn -= audio;
      estimated = true;
    }
  }
  if (!t.outputSplit) {
    // No output breakdown: the total holds the audio the relay delivered, which bills at the audio price (before,
    // all of it billed as text, a quarter of gpt-realtime's audio output price). A total that is unusable too is
    // replaced by the text delivered; the audio delivered bills as audio all the same.
    audioOut = ok(t.outputTotal) ? Math.min(t.outputTotal, delivered.audioOutput) : delivered.audioOutput;
    if (ok(t.outputTotal)) textOut = t.outputTotal - audioOut;
    if (audioOut > 0 && ok(t.outputTotal)) estimated = true;
  }
  // An unusable output count: the rest of a usable total once the other kind (as billed) is taken out, never less
  // than what was delivered of that kind (before: what was delivered only, 0 for audio the relay did not see).
  const total = ok(t.outputTotal) ? t.outputTotal : undefined;
  const textOutFallback = total !== undefined && ok(audioOut) ? Math.max(delivered.output, total - audioOut) : delivered.output;
  const audioOutFallback = total !== undefined ? Math.max(delivered.audioOutput, total - (ok(textOut) ? textOut : textOutFallback)) : delivered.audioOutput;
  if (t.audioOutAbsent && delivered.audioOutput > 0) {
    // A breakdown naming text output only while the relay delivered audio: the audio is not none (billed so before).
    audioOut = audioOutFallback;
    estimated = true;
  }
  return {
    usage: { input: textIn, output: textOut, cacheRead: t.cachedIn, cacheWrite: 0, audioInput: audioIn, audioOutput: audioOut },
    estimate: { output: textOutFallback, audioOutput: audioOutFallback, audioInput: inputBound, cacheRead: t.cachedMoved },
    estimated,
  };
}
