/**
 * What a response delivered before its `response.done`: the estimate its settlement falls back on when
 * the session ends without one (client gone, upstream cut, key revoked, limits, shutdown). Read from the
 * output deltas as they pass, without parsing the big audio ones.
 */
import { estimateTextTokens } from '@gw/formats';

/** GA and beta names of the deltas whose text is output (the transcript of spoken output is billed as text too). */
const TEXT_DELTAS = new Set([
  'response.output_text.delta', 'response.text.delta',
  'response.output_audio_transcript.delta', 'response.audio_transcript.delta',
  'response.function_call_arguments.delta',
]);
const AUDIO_DELTAS = new Set(['response.output_audio.delta', 'response.audio.delta']);

/**
 * OpenAI bills assistant audio at one token per 50 ms. Counted from the bytes at the session's output
 * format (PCM16 at 24 kHz unless the upstream announced G.711), so a cut spoken answer is billed for what played.
 */
const AUDIO_TOKENS_PER_SECOND = 20;
const PCM16_24K_BYTES_PER_SECOND = 48_000;
const G711_BYTES_PER_SECOND = 8_000;

export interface DeliveredTokens { output: number; audioOutput: number }

const FAST_PREFIX = '{"type":"';

/** The raw value of a string field (escapes left as they are), or undefined. */
function rawString(text: string, field: string): string | undefined {
  const key = `"${field}":"`;
  const at = text.indexOf(key);
  if (at === -1) return undefined;
  const start = at + key.length;
  let end = text.indexOf('"', start);
  while (end > 0 && text[end - 1] === '\\') end = text.indexOf('"', end + 1);
  return end === -1 ? undefined : text.slice(start, end);
}

/** An output delta: its response (may be '') and its text or the length of its base64 audio. */
export function outputDelta(text: string): { responseId: string; text?: string; audioB64?: number } | undefined {
  let type: string | undefined;
  if (text.startsWith(FAST_PREFIX)) {
    type = text.slice(FAST_PREFIX.length, text.indexOf('"', FAST_PREFIX.length));
    if (AUDIO_DELTAS.has(type)) {
      // Base64 has no escapes: its length is read off the frame, which is never parsed.
      return { responseId: rawString(text, 'response_id') ?? '', audioB64: rawString(text, 'delta')?.length ?? 0 };
    }
    if (!TEXT_DELTAS.has(type)) return undefined;
  } else if (!text.includes('delta')) return undefined;
  let ev: any;
  try {
    ev = JSON.parse(text);
  } catch {
    return undefined;
  }
  const delta = typeof ev?.delta === 'string' ? ev.delta : '';
  const responseId = typeof ev?.response_id === 'string' ? ev.response_id : '';
  if (TEXT_DELTAS.has(ev?.type)) return { responseId, text: delta };
  if (AUDIO_DELTAS.has(ev?.type)) return { responseId, audioB64: delta.length };
  return undefined;
}

/** Bytes per second of the output audio a session's settings announce (GA `audio.output.format`, beta `output_audio_format`). */
export function outputAudioRate(session: any, current: number): number {
  const ga = session?.audio?.output?.format;
  const kind = typeof ga === 'object' && ga ? ga.type : session?.output_audio_format;
  if (typeof kind !== 'string') return current;
  if (/pcmu|pcma|g711/.test(kind)) return G711_BYTES_PER_SECOND;
  const rate = typeof ga?.rate === 'number' && ga.rate > 0 ? ga.rate : 24_000;
  return 2 * rate;
}

export const DEFAULT_AUDIO_RATE = PCM16_24K_BYTES_PER_SECOND;

/** Output delivered per response, until its response.done (or the session's end) takes it. */
export class DeliveredOutput {
  private readonly by = new Map<string, { textTokens: number; audioBytes: number }>();
  audioRate = DEFAULT_AUDIO_RATE;

  /** Counts a delta; `fallbackId` is the response it belongs to when it names none. */
  add(text: string, fallbackId: () => string): string | undefined {
    const d = outputDelta(text);
    if (!d) return undefined;
    const id = d.responseId || fallbackId();
    let e = this.by.get(id);
    if (!e) this.by.set(id, (e = { textTokens: 0, audioBytes: 0 }));
    if (d.text) e.textTokens += estimateTextTokens(d.text);
    if (d.audioB64) e.audioBytes += Math.floor((d.audioB64 * 3) / 4);
    return id;
  }

  has(id: string): boolean {
    return this.by.has(id);
  }

  /** Responses with output counted and not taken yet. */
  get size(): number {
    return this.by.size;
  }

  ids(): string[] {
    return [...this.by.keys()];
  }

  /** The estimate of a response's output, forgotten here. */
  take(id: string): DeliveredTokens {
    const t = this.peek(id);
    this.by.delete(id);
    return t;
  }

  /** The estimate of a response's output so far, kept. */
  peek(id: string): DeliveredTokens {
    const e = this.by.get(id);
    if (!e) return { output: 0, audioOutput: 0 };
    return { output: e.textTokens, audioOutput: Math.ceil((e.audioBytes * AUDIO_TOKENS_PER_SECOND) / this.audioRate) };
  }
}
