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

/**
 * `maxEventBytes` caps one upstream event (SseParser); an oversized one ends the stream through the
 * machine's `onFailure`, like a failed read, and the upstream is cancelled.
 */
export function pipeSse(upstream: ReadableStream<Uint8Array>, machine: SseMachine, onFirstByte: () => void, maxEventBytes?: number): ReadableStream<Uint8Array> {
  const reader = upstream.getReader();
  const parser = new SseParser(maxEventBytes);
  const encoder = new TextEncoder();
  let ended = false;
  let sentAny = false;
  const send = (ctrl: ReadableStreamDefaultController<Uint8Array>, text: string) => {
    if (!text) return;
    if (!sentAny) {
      sentAny = true;
      onFirstByte();
    }
    ctrl.enqueue(encoder.encode(text));
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
          send(ctrl, machine.onFailure(err));
          break;
        }
        let out = '';
        let events: SseEvent[];
        try {
          events = chunk.done ? parser.end() : parser.push(chunk.value);
        } catch (err) {
          ended = true;
          reader.cancel().catch(() => {});
          send(ctrl, machine.onFailure(err));
          break;
        }
        for (const ev of events) {
          out += machine.onEvent(ev);
          if (machine.stopped) break;
        }
        if (chunk.done || machine.stopped) {
          ended = true;
          if (!machine.stopped) out += machine.onEnd();
          else reader.cancel().catch(() => {});
          send(ctrl, out);
          break;
        }
        if (out) return send(ctrl, out);
      }
      ctrl.close();
    },
    cancel(reason) {
      ended = true;
      return reader.cancel(reason);
    },
  }, { highWaterMark: 0 });
}
