/** Stream decoder of OpenAI-compatible upstreams: SSE chunks → the B4 translator → Anthropic SSE. */
import { newMessageId } from '@gw/core';
import { ChatStreamTranslator, encodeAnthropicEvent, type AnthropicStreamEvent, type ChatCompletionChunk, type SseEvent } from '@gw/formats';
import type { DecodeContext, StreamDecoder } from '../adapter';
import { failureMessage, upstreamStreamError } from '../stream-errors';
import { pipeSse, sseFramer, sseTranscoder, type SseMachine } from '../sse-pipe';

const encodeAll = (events: AnthropicStreamEvent[]) => events.map(encodeAnthropicEvent).join('');

export class OpenAIStreamMachine implements SseMachine {
  stopped = false;
  private done = false;
  private error: string | undefined;
  readonly translator: ChatStreamTranslator;

  constructor(ctx: DecodeContext) {
    this.translator = new ChatStreamTranslator({
      requestedModel: ctx.requestedModel,
      id: ctx.messageId ?? newMessageId(),
      inputTokens: ctx.inputTokens,
      stopSequences: ctx.stopSequences,
      toolNames: ctx.toolNames,
    });
  }

  onEvent(ev: SseEvent): string {
    if (ev.data === '[DONE]') {
      this.done = true;
      this.stopped = true;
      return encodeAll(this.translator.finish());
    }
    let chunk: (ChatCompletionChunk & { error?: { message?: string; type?: string } }) | undefined;
    try {
      chunk = JSON.parse(ev.data);
    } catch {
      return ''; // a malformed line is skipped rather than failing an answer in flight
    }
    // Some compatible servers report a mid-stream failure as a data line carrying an error object, OpenRouter
    // with choices too (finish_reason "error"): either way the answer was cut, never a finished message.
    // The error's text is not shown (it can carry the key); only a known error type survives.
    if (!chunk || typeof chunk !== 'object') return ''; // a JSON value that is no chunk (null, 5, "x") is skipped like a malformed line
    if (chunk.error || (Array.isArray(chunk.choices) && chunk.choices.some((c) => (c?.finish_reason as string | null) === 'error'))) {
      this.translator.usageOf(chunk);
      // After the finish_reason the answer is whole (as when the connection fails there, onFailure): an error then
      // turned a delivered, billed answer into an error event, which clients retry and pay for again. Its usage is
      // kept and reading goes on (the usage chunk may still follow).
      if (this.translator.sawFinish) return '';
      const e = upstreamStreamError((chunk.error as { type?: unknown } | null)?.type);
      return this.fail(e.message, e.type);
    }
    const out = encodeAll(this.translator.push(chunk));
    // The translator ended the stream itself (a cap on what it holds): nothing more is read.
    if (this.translator.failedWith !== null) {
      this.error = this.translator.failedWith;
      this.stopped = true;
    }
    return out;
  }

  /** Finished and usage reported: only `[DONE]` or the close is missing. */
  get whole(): boolean {
    return this.translator.sawFinish && this.translator.sawUsage;
  }

  /** finish_reason arrived: the usage chunk may still follow, but no more output. */
  get generated(): boolean {
    return this.translator.sawFinish;
  }

  onEnd(): string {
    if (this.translator.sawFinish) return encodeAll(this.translator.finish()); // no [DONE], but the answer is whole
    return this.fail('The upstream stream ended unexpectedly.');
  }

  onFailure(err?: unknown): string {
    if (this.translator.sawFinish) return encodeAll(this.translator.finish());
    return this.fail(failureMessage(err));
  }

  get failure(): string | undefined {
    return this.error;
  }

  private fail(message: string, type = 'api_error'): string {
    this.error = message;
    this.stopped = true;
    return encodeAll(this.translator.fail(message, type));
  }
}

export function createOpenAIStreamDecoder(ctx: DecodeContext): StreamDecoder {
  const machine = new OpenAIStreamMachine(ctx);
  let firstByteAt: number | undefined;
  const now = ctx.now ?? Date.now;
  const transcoder = sseTranscoder(machine, () => (firstByteAt = now()), sseFramer(machine, ctx.maxEventBytes));
  return {
    transcoder,
    pipe: (upstream) => pipeSse(upstream, transcoder),
    result: () => {
      const o = machine.translator.outcome();
      return { usage: o.usage, estimatedUsage: o.estimatedUsage, stopReason: o.stopReason, complete: o.complete, firstByteAt, error: machine.failure };
    },
  };
}
