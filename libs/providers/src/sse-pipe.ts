/**
 * Drives an SSE state machine over upstream bytes, synchronously (`sseTranscoder`), or as a pull-based
 * stream over an upstream body (`pipeSse`): the upstream is read only as fast as the client reads
 * (backpressure), a client cancel cancels the upstream, and an upstream failure becomes the machine's
 * error frame instead of a torn connection (which a TransformStream could not do: an aborted pipe never
 * reaches its flush).
 */
import { coalesceBytes } from '@gw/core';
import { SseParser, type SseEvent } from '@gw/formats';
import type { StreamTranscoder } from './adapter';

/** Stateless, so one for every stream (a held stream keeps what it references). */
const encoder = new TextEncoder();

export interface SseMachine {
  /** Frames to send for one upstream event. */
  onEvent(ev: SseEvent): string;
  /** The upstream body ended. */
  onEnd(): string;
  /** Reading the upstream body failed. */
  onFailure(err: unknown): string;
  /** True when the machine wants no more upstream input (it already ended the client stream). */
  readonly stopped: boolean;
  /** True once the message's last event went out, where the machine still reads on to the upstream's close. */
  readonly complete?: boolean;
  /** True once the answer is whole (its end and its usage arrived): only the upstream's close or `[DONE]` is missing. */
  readonly whole?: boolean;
  /** True once the upstream finished generating and only its usage report (and close) may follow. */
  readonly generated?: boolean;
}

/** Turns upstream chunks into client bytes, driving a machine; throws SseEventTooLargeError past the cap. */
export interface SseFramer {
  push(chunk: Uint8Array): Uint8Array[];
  /** The upstream body ended. */
  end(): Uint8Array[];
}

/** The generic framer: every event parsed (SseParser) and re-encoded by the machine. */
export function sseFramer(machine: SseMachine, maxEventBytes?: number): SseFramer {
  const parser = new SseParser(maxEventBytes);
  const run = (events: SseEvent[]) => {
    let out = '';
    for (const ev of events) {
      out += machine.onEvent(ev);
      if (machine.stopped) break;
    }
    return out ? [encoder.encode(out)] : [];
  };
  return { push: (c) => run(parser.push(c)), end: () => run(parser.end()) };
}

/**
 * Drives `machine` through `framer` synchronously. `maxEventBytes` (in the framer) caps one upstream
 * event; an oversized one ends the stream through the machine's `onFailure`, like a failed read, and the
 * transcoder stops (the caller cancels the upstream). `onFirstByte` runs with the first output.
 */
export function sseTranscoder(machine: SseMachine, onFirstByte: () => void, framer: SseFramer): StreamTranscoder {
  let ended = false;
  let sentAny = false;
  const send = (parts: Uint8Array[], text = ''): Uint8Array[] => {
    if (text) parts.push(encoder.encode(text));
    if (parts.length && !sentAny) {
      sentAny = true;
      onFirstByte();
    }
    return parts;
  };
  const failed = (err: unknown) => {
    ended = true;
    return send([], machine.onFailure(err));
  };
  return {
    get stopped() { return ended; },
    get messageEnded() { return ended || machine.complete === true; },
    get answerWhole() { return ended || machine.whole === true; },
    get generated() { return ended || machine.generated === true; },
    push(chunk) {
      if (ended) return [];
      let out: Uint8Array[];
      try {
        out = framer.push(chunk);
      } catch (err) {
        return failed(err);
      }
      if (machine.stopped) ended = true;
      return send(out);
    },
    end() {
      if (ended) return [];
      let out: Uint8Array[];
      try {
        out = framer.end();
      } catch (err) {
        return failed(err);
      }
      ended = true;
      return send(out, machine.stopped ? '' : machine.onEnd());
    },
    fail: (err) => (ended ? [] : failed(err)),
  };
}

/**
 * The transcoder as a pull-based stream over an upstream body (one upstream read per pull until
 * something is sent): for callers that want a stream; the relay drives the transcoder itself.
 */
export function pipeSse(upstream: ReadableStream<Uint8Array>, t: StreamTranscoder): ReadableStream<Uint8Array> {
  const reader = upstream.getReader();
  return new ReadableStream<Uint8Array>({
    async pull(ctrl) {
      // Loop until something is sent: a pull that enqueues nothing would never be called again.
      while (!t.stopped) {
        let out: Uint8Array[];
        try {
          const chunk = await reader.read();
          out = chunk.done ? t.end() : t.push(chunk.value);
          if (t.stopped && !chunk.done) reader.cancel().catch(() => {});
        } catch (err) {
          out = t.fail(err);
        }
        for (const part of coalesceBytes(out)) ctrl.enqueue(part);
        if (out.length && !t.stopped) return;
      }
      ctrl.close();
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  }, { highWaterMark: 0 });
}
