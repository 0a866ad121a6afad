/**
 * Channels whose upstream refuses `stream_options` (older Azure OpenAI api-versions, some vLLM builds and proxies
 * answer 400 to a field they do not know). Without it a translated stream never gets its usage chunk, so such a
 * channel was unusable for streams; now the refused request is sent once more without it, and when that one is
 * accepted the channel is remembered (in memory, per node) as one to send none to; its streams are billed on the
 * gateway's estimates, flagged `estimated`. Learnt only from an accepted retry whose request names `stream_options` nowhere
 * (not in the client's text either): an upstream 400 that merely quotes a client's text naming it tells nothing about
 * the field, whether the retry fails again or (a flaky filter) is accepted, so no client can switch a channel's usage off.
 */

/** How long a refusal is remembered: an upstream upgraded meanwhile gets `stream_options` (exact usage) again. */
export const STREAM_OPTIONS_REFUSAL_MS = 60 * 60 * 1000;

export class StreamOptionsRefusals {
  /** Channel id → the base URL the refusal was learnt at and until when it holds (a moved channel is asked anew). */
  private readonly refused = new Map<number, { baseUrl: string; until: number }>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Whether `ch`'s upstream is known to refuse `stream_options`. */
  refuses(ch: { id: number; baseUrl: string }): boolean {
    const r = this.refused.get(ch.id);
    if (!r) return false;
    if (r.baseUrl === ch.baseUrl && r.until > this.now()) return true;
    this.refused.delete(ch.id);
    return false;
  }

  learn(ch: { id: number; baseUrl: string }): void {
    this.refused.set(ch.id, { baseUrl: ch.baseUrl, until: this.now() + STREAM_OPTIONS_REFUSAL_MS });
  }
}

/** Whether an upstream's error answer names `stream_options` (its message, `param`, or a validation error's `loc`). */
export const namesStreamOptions = (body: string): boolean => body.includes('stream_options');
