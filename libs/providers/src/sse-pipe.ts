/**
 * Drives an SSE state machine over an upstream body, pull-based: the upstream is read only as fast as
 * the client reads (backpressure), a client cancel cancels the upstream, and an upstream failure becomes
 * the machine's error frame instead of a torn connection (which a TransformStream could not do: an
 * aborted pipe never reaches its flush).
 */
import { SseParser, type SseEvent } from '@gw/formats';
import type { ChunkSource, SsePump } from './adapter';

/** Shared: a TextEncoder per stream is memory every held stream pays for nothing. */
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

function joined(parts: Uint8Array[]): Uint8Array | null {
  if (parts.length <= 1) return parts[0] ?? null;
  let n = 0;
  for (const p of parts) n += p.byteLength;
  const out = new Uint8Array(n);
  n = 0;
  for (const p of parts) {
    out.set(p, n);
    n += p.byteLength;
  }
  return out;
}

/**
 * Drives `machine` over `source`, pull-based: each next() reads the upstream until there is something to
 * send. `maxEventBytes` caps one upstream event (SseParser); an oversized one ends the stream through the
 * machine's `onFailure`, like a failed read, and the source is cancelled. `framer` defaults to the generic
 * one; an adapter may pass a faster one for its own format.
 */
export function ssePump(source: ChunkSource, machine: SseMachine, onFirstByte: () => void, maxEventBytes?: number,
  framer: SseFramer = sseFramer(machine, maxEventBytes)): SsePump {
  let ended = false;
  let sentAny = false;
  const out = (parts: Uint8Array[], text = ''): Uint8Array | null => {
    if (text) parts.push(encoder.encode(text));
    const o = joined(parts);
    if (o && !sentAny) {
      sentAny = true;
      onFirstByte();
    }
    return o;
  };
  return {
    async next() {
      // Loop until something is sent: an empty answer would read as the end.
      while (!ended) {
        let chunk: { done: boolean; value?: Uint8Array };
        try {
          chunk = await source.read();
        } catch (err) {
          ended = true;
          return out([], machine.onFailure(err));
        }
        let parts: Uint8Array[];
        try {
          parts = chunk.done ? framer.end() : framer.push(chunk.value!);
        } catch (err) {
          ended = true;
          source.cancel().catch(() => {});
          return out([], machine.onFailure(err));
        }
        if (chunk.done || machine.stopped) {
          ended = true;
          const tail = machine.stopped ? '' : machine.onEnd();
          if (machine.stopped) source.cancel().catch(() => {});
          return out(parts, tail);
        }
        const o = parts.length ? out(parts) : null;
        if (o) return o;
      }
      return null;
    },
    cancel(reason) {
      ended = true;
      return source.cancel(reason);
    },
  };
}

/** ssePump as a byte stream: the upstream is read only as fast as the stream is, and cancelling it cancels the upstream. */
export function pipeSse(upstream: ReadableStream<Uint8Array>, machine: SseMachine, onFirstByte: () => void, maxEventBytes?: number,
  framer: SseFramer = sseFramer(machine, maxEventBytes)): ReadableStream<Uint8Array> {
  const pump = ssePump(upstream.getReader(), machine, onFirstByte, maxEventBytes, framer);
  return new ReadableStream<Uint8Array>({
    async pull(ctrl) {
      const chunk = await pump.next();
      if (chunk) ctrl.enqueue(chunk);
      else ctrl.close();
    },
    cancel: (reason) => pump.cancel(reason),
  }, { highWaterMark: 0 });
}
