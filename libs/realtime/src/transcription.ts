/**
 * Input audio transcription: when a session turns it on (GA `session.audio.input.transcription`, beta
 * `session.input_audio_transcription`), the upstream transcribes every committed audio item with the model
 * named there and bills it apart from any response, reporting the usage on
 * `conversation.item.input_audio_transcription.completed`. The gateway bills each such event once, at that
 * model's price: without this a client could turn on a paid transcription model that nobody is charged for.
 */
import { estimateTextTokens } from '@gw/formats';
import { tokensOf } from './usage';

export const TRANSCRIPTION_DONE = 'conversation.item.input_audio_transcription.completed';

/**
 * OpenAI counts input audio at one token per 100 ms: a usage reported as a duration (whisper-1) is
 * billed as that many audio input tokens.
 */
const INPUT_AUDIO_TOKENS_PER_SECOND = 10;

/**
 * The transcription model a session object sets: a name, null when it turns transcription off, undefined
 * when it does not say (the previous setting stays). A non-string model counts as a name nobody prices.
 */
export function transcriptionModelOf(session: unknown): string | null | undefined {
  if (!session || typeof session !== 'object') return undefined;
  const s = session as any;
  const audioInput = s.audio && typeof s.audio === 'object' ? s.audio.input : undefined;
  const hasGa = audioInput && typeof audioInput === 'object' && Object.hasOwn(audioInput, 'transcription');
  const cfg = hasGa ? audioInput.transcription : Object.hasOwn(s, 'input_audio_transcription') ? s.input_audio_transcription : undefined;
  if (cfg === undefined) return undefined;
  if (cfg === null) return null;
  if (typeof cfg !== 'object') return String(cfg);
  // An object without a model lets the upstream pick its default: still a paid transcription.
  return typeof cfg.model === 'string' ? cfg.model : JSON.stringify(cfg.model ?? null);
}

/** The usage of one completed transcription as billing takes it, and whether it is the gateway's estimate. */
export function transcriptionUsage(event: any): { usage: { input: unknown; output: unknown; cacheRead: unknown; cacheWrite: number; audioInput: unknown; audioOutput: number }; estimated: boolean } {
  const u = event?.usage;
  if (u && typeof u === 'object' && u.type === 'duration') {
    const s = typeof u.seconds === 'number' && Number.isFinite(u.seconds) && u.seconds > 0 ? u.seconds : NaN;
    return { usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, audioInput: Math.ceil(s * INPUT_AUDIO_TOKENS_PER_SECOND), audioOutput: 0 }, estimated: true };
  }
  if (u && typeof u === 'object') {
    const t = tokensOf(u);
    return { usage: { input: t.textIn, output: t.textOut, cacheRead: t.cachedIn, cacheWrite: 0, audioInput: t.audioIn, audioOutput: 0 }, estimated: false };
  }
  // No usage (the beta events carry none): the transcript, as text output; the audio is not known.
  const text = typeof event?.transcript === 'string' ? event.transcript : '';
  return { usage: { input: 0, output: estimateTextTokens(text), cacheRead: 0, cacheWrite: 0, audioInput: 0, audioOutput: 0 }, estimated: true };
}
