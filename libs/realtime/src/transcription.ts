/**
 * Input audio transcription: when a session turns it on (GA `session.audio.input.transcription`, beta
 * `session.input_audio_transcription`), the upstream transcribes every committed audio item with the model
 * named there and bills it apart from any response, reporting the usage on
 * `conversation.item.input_audio_transcription.completed`. The gateway bills each such event once, at that
 * model's price (else the session model's, never free): without this a client could turn on a paid
 * transcription model that nobody is charged for. Turning it on is not refused for a key that may use any model:
 * the common clients do it in their first session.update (whisper-1), which a refusal would throw away whole. A key
 * with a model allow-list may only name a model of that list (transcriptionNotAllowed), as for any other model it uses.
 */
import { estimateTextTokens } from '@gw/formats';
import { folded } from './ambiguous';
import { ok, tokensOf } from './usage';

export const TRANSCRIPTION_DONE = 'conversation.item.input_audio_transcription.completed';

/**
 * OpenAI counts input audio at one token per 100 ms: a usage reported as a duration (whisper-1) is
 * billed as that many audio input tokens.
 */
const INPUT_AUDIO_TOKENS_PER_SECOND = 10;

/** How a transcription model that is not a string is named (never the client's value, which may be huge). */
const NOT_A_NAME = '(not a string)';

/** The GA and beta transcription settings of a session object, each undefined when absent. */
function settingsOf(session: unknown): unknown[] {
  if (!session || typeof session !== 'object') return [];
  const s = session as any;
  const audioInput = s.audio && typeof s.audio === 'object' ? s.audio.input : undefined;
  const ga = audioInput && typeof audioInput === 'object' && Object.hasOwn(audioInput, 'transcription') ? audioInput.transcription : undefined;
  const beta = Object.hasOwn(s, 'input_audio_transcription') ? s.input_audio_transcription : undefined;
  return [ga, beta];
}

/** The values of `o`'s keys that a case-insensitive parser (Go's encoding/json) reads as `name`. */
function readAs(o: unknown, name: string): unknown[] {
  if (!o || typeof o !== 'object' || Array.isArray(o)) return [];
  return Object.keys(o).filter((k) => folded(k) === name).map((k) => (o as any)[k]);
}

/**
 * The first transcription model a client's session object asks for that `allowed` does not hold (a model name, or
 * "(no model)" for a setting that lets the upstream pick its default, "(not a string)"), else undefined. Every
 * spelling an upstream may read is looked at (`Audio.Input.Transcription.Model`): a lenient upstream reads them as
 * the setting. Turning transcription off (null) is always allowed.
 */
export function transcriptionNotAllowed(session: unknown, allowed: readonly string[]): string | undefined {
  const settings = [
    ...readAs(session, 'input_audio_transcription'),
    ...readAs(session, 'audio').flatMap((a) => readAs(a, 'input')).flatMap((i) => readAs(i, 'transcription')),
  ];
  for (const cfg of settings) {
    if (cfg === null) continue;
    const names = cfg !== null && typeof cfg === 'object' ? readAs(cfg, 'model') : [cfg];
    // No model: the upstream's default, which the key may not be allowed.
    if (names.length === 0) return '(no model)';
    for (const m of names) {
      if (typeof m !== 'string') return NOT_A_NAME;
      if (!allowed.includes(m)) return m;
    }
  }
  return undefined;
}

/** The error a refused transcription model is answered with (the session stays open, the update is not forwarded). */
export function transcriptionRefusal(asked: string) {
  const shown = asked.length > 100 ? `${asked.slice(0, 100)}…` : asked;
  return {
    refuse: true as const,
    type: 'invalid_request_error',
    code: 'model_not_allowed',
    message: `This API key may not use model ${shown} for input transcription; name a model the key may use`,
  };
}

/** The model a transcription setting names: null when it turns transcription off, undefined when absent. */
function modelOf(cfg: unknown): string | null | undefined {
  if (cfg === undefined || cfg === null) return cfg;
  // A setting without a model (or with an empty one) lets the upstream pick its default: still paid.
  const m = typeof cfg === 'object' ? (cfg as any).model : cfg;
  return typeof m === 'string' ? m : NOT_A_NAME;
}

/**
 * The transcription model a session object the upstream confirmed sets: a name, null when it turns
 * transcription off, undefined when it does not say (the previous setting stays). GA's setting wins.
 */
export function transcriptionModelOf(session: unknown): string | null | undefined {
  const [ga, beta] = settingsOf(session).map(modelOf);
  return ga !== undefined ? ga : beta;
}

/** The usage of one completed transcription as billing takes it, and whether it is the gateway's estimate. */
export function transcriptionUsage(event: any, price: { input: number; audioInput: number }): { usage: { input: unknown; output: unknown; cacheRead: unknown; cacheWrite: number; audioInput: unknown; audioOutput: number }; estimated: boolean;
  /** The reported input total, and the cached tokens the breakdown took out of the others (see RealtimeTokens). */
  inputTotal?: number; cachedMoved?: number } {
  const r = reportedUsage(event);
  if (r.split !== false || price.audioInput < price.input) return r;
  // No input breakdown: a transcription's input is the audio it transcribes (and a short prompt), so the total bills
  // as audio, the dearer (before: all of it as text). An unusable or missing total is then an unusable audio count.
  const total = r.usage.input;
  r.usage.input = 0;
  r.usage.audioInput = total === undefined ? Number.NaN : total;
  if (ok(total as number) && (total as number) > 0) r.estimated = true;
  return r;
}

function reportedUsage(event: any): { usage: { input: unknown; output: unknown; cacheRead: unknown; cacheWrite: number; audioInput: unknown; audioOutput: number }; estimated: boolean;
  inputTotal?: number; cachedMoved?: number; split?: boolean } {
  const u = event?.usage;
  if (u && typeof u === 'object' && u.type === 'duration') {
    const s = typeof u.seconds === 'number' && Number.isFinite(u.seconds) && u.seconds > 0 ? u.seconds : NaN;
    return { usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, audioInput: Math.ceil(s * INPUT_AUDIO_TOKENS_PER_SECOND), audioOutput: 0 }, estimated: true };
  }
  if (u && typeof u === 'object') {
    const t = tokensOf(u);
    return { usage: { input: t.textIn, output: t.textOut, cacheRead: t.cachedIn, cacheWrite: 0, audioInput: t.audioIn, audioOutput: 0 }, estimated: false, inputTotal: t.inputTotal, cachedMoved: t.cachedMoved, split: t.inputSplit };
  }
  // No usage (the beta events carry none): the transcript, as text output; the audio is not known.
  const text = typeof event?.transcript === 'string' ? event.transcript : '';
  return { usage: { input: 0, output: estimateTextTokens(text), cacheRead: 0, cacheWrite: 0, audioInput: 0, audioOutput: 0 }, estimated: true };
}

export const TRANSCRIPTION_FAILED = 'conversation.item.input_audio_transcription.failed';
export const TRANSCRIPTION_DELTA = 'conversation.item.input_audio_transcription.delta';

/** A committed audio item the upstream is transcribing, billed on this estimate if its completion never arrives. */
export interface PendingTranscription { id: string; model: string; audioBytes: number; textTokens: number }

/**
 * Transcriptions the upstream started and has not reported: one per `input_audio_buffer.committed` while
 * transcription is on, holding the audio appended since the previous commit (all the commit can hold) and
 * the transcript deltas seen. `completed` bills the reported usage and `failed` nothing (the upstream reports
 * a failure, no usage and no transcript), both taking the item; what is left when the session ends is
 * billed on its estimate (transcription.ts's rate of 10 audio tokens a second, the transcript deltas as output).
 */
export class PendingTranscriptions {
  private readonly by = new Map<string, PendingTranscription>();

  committed(id: string, model: string, audioBytes: number): void {
    if (!this.by.has(id)) this.by.set(id, { id, model, audioBytes, textTokens: 0 });
  }

  /** Transcriptions started and not reported yet. */
  get size(): number {
    return this.by.size;
  }

  delta(id: string, text: unknown): void {
    const p = this.by.get(id);
    if (p && typeof text === 'string') p.textTokens += estimateTextTokens(text);
  }

  take(id: string): PendingTranscription | undefined {
    const p = this.by.get(id);
    this.by.delete(id);
    return p;
  }

  takeAll(): PendingTranscription[] {
    const all = [...this.by.values()];
    this.by.clear();
    return all;
  }
}

/** Audio input tokens of `seconds` of audio, at the rate a duration report is billed. */
export const audioTokensOf = (seconds: number): number => Math.ceil(seconds * INPUT_AUDIO_TOKENS_PER_SECOND);
