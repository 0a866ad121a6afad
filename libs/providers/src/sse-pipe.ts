/**
 * Drives an SSE state machine over an upstream body, pull-based: the upstream is read only as fast as
 * the client reads (backpressure), a client cancel cancels the upstream, and an upstream failure becomes
 * the machine's error frame instead of a torn connection (which a TransformStream could not do: an
 * aborted pipe never reaches its flush).
 */
import { SseParser, type SseEvent } from '@gw/formats';

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
  const encoder = new TextEncoder();
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
 * `maxEventBytes` caps one upstream event (SseParser); an oversized one ends the stream through the
 * machine's `onFailure`, like a failed read, and the upstream is cancelled. `framer` defaults to the
 * generic one; an adapter may pass a faster one for its own format.
 */
export function pipeSse(upstream: ReadableStream<Uint8Array>, machine: SseMachine, onFirstByte: () => void, maxEventBytes?: number,
  framer: SseFramer = sseFramer(machine, maxEventBytes)): ReadableStream<Uint8Array> {
  const reader = upstream.getReader();
  const encoder = new TextEncoder();
  let ended = false;
  let sentAny = false;
  const send = (ctrl: ReadableStreamDefaultController<Uint8Array>, parts: Uint8Array[], text = '') => {
    if (text) parts.push(encoder.encode(text));
    const out = joined(parts);
    if (!out) return;
    if (!sentAny) {
      sentAny = true;
      onFirstByte();
    }
    ctrl.enqueue(out);
  };
  return new ReadableStream<Uint8Array>({
    async pull(ctrl) {
      // Loop until something is sent: a pull that enqueues nothing would never be called again.
      while (!ended) {
        let chunk: Awaited<ReturnType<typeof reader.read>>;
        try {
          chunk = await reader.read();
        } catch (err) {
          ended = true;
          send(ctrl, [], machine.onFailure(err));
          break;
        }
        let out: Uint8Array[];
        try {
          out = chunk.done ? framer.end() : framer.push(chunk.value);
        } catch (err) {
          ended = true;
          reader.cancel().catch(() => {});
          send(ctrl, [], machine.onFailure(err));
          break;
        }
        if (chunk.done || machine.stopped) {
          ended = true;
          const tail = machine.stopped ? '' : machine.onEnd();
          if (machine.stopped) reader.cancel().catch(() => {});
          send(ctrl, out, tail);
          break;
        }
        if (out.length) return send(ctrl, out);
      }
      ctrl.close();
    },
    cancel(reason) {
      ended = true;
      return reader.cancel(reason);
    },
  }, { highWaterMark: 0 });
}
