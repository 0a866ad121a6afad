/**
 * The OpenAI chunk → Anthropic SSE event state machine (as in OpenAI's Chat Completions API). Pure: feed parsed chunks,
 * get events back; the caller owns I/O and decides, at the end of the upstream body, between `finish()`
 * (the upstream ended properly) and `fail()` (it was cut).
 */
import type { AnthropicStreamEvent, StopReason, Usage } from '../anthropic/response';
import { countsNothing, zeroUsage } from '../anthropic/response';
import type { ChatCompletionChunk, ChatToolCallDelta } from '../openai/types';
import { estimateTextTokens } from '../tokens';
import { ToolArgsFilter } from './tool-args';
import { foldUsage } from './usage-fold';
import { clientToolId, clientToolName, estimatedInput, finalStopReason, firstChoice, objectArguments, textOf, usableCount, usageFromOpenAI } from './common';

export interface StreamTranslatorOptions {
  /** The model the client asked for; echoed in message_start. */
  requestedModel: string;
  /** The message id (`msg_…`); the caller generates it so this class stays pure. */
  id: string;
  /** Input tokens known before the upstream answers (an estimate), sent in message_start. */
  inputTokens?: number;
  /** The request's stop_sequences, to recognise a reported stop string. */
  stopSequences?: readonly string[];
  /** Upstream tool name → the client's, for names renamed to fit OpenAI (toolNameMap). */
  toolNames?: Readonly<Record<string, string>>;
  /** Cap of text and tool arguments held back behind unfinished tool calls (characters); default MAX_HELD_CHARS. */
  maxHeldChars?: number;
  /** Cap of tool calls in one answer; default MAX_STREAM_TOOL_CALLS. */
  maxToolCalls?: number;
}

/**
 * What a stream may hold back (text and reasoning behind an unfinished tool call, arguments of calls waiting
 * for the live one): past it the stream ends with an error event rather than holding an upstream's output
 * without bound. 8 Mi characters is far beyond any real interleaving.
 */
export const MAX_HELD_CHARS = 8 << 20;
/** Tool calls one streamed answer may hold (each is a block and an entry kept to the end); past it: error event. */
export const MAX_STREAM_TOOL_CALLS = 10_000;

/** What the stream amounted to, for metering. */
export interface StreamOutcome {
  /** Usage the upstream reported; null when its usage chunk never came (then only `estimatedUsage` is known). */
  usage: Usage | null;
  /** `usage` if known, else the input pre-count plus an output estimate from the text streamed. */
  estimatedUsage: Usage;
  stopReason: StopReason | null;
  /** True once message_stop was emitted; false for a cut or failed stream. */
  complete: boolean;
  /** True once an error event was emitted. */
  failed: boolean;
}

type Open = { kind: 'text' | 'thinking' | 'tool'; index: number } | null;
interface PendingTool { id: string; name: string; args: string[]; ordinal: number; tokens: number; filter: ToolArgsFilter }
type ToolKey = number | string;
interface HeldText { kind: 'text' | 'thinking'; piece: string }

/** Builds the `error` event (B4 step 8); its frame is `event: error`. */
export function errorEvent(message: string, type = 'api_error'): AnthropicStreamEvent {
  return { type: 'error', error: { type, message } };
}

export class ChatStreamTranslator {
  private started = false;
  private ended = false;
  private failed = false;
  private nextIndex = 0;
  private open: Open = null;
  /** OpenAI tool index streaming live into the open block. */
  private liveTool: ToolKey | null = null;
  /** What of the live call's arguments can reach the client (ToolArgsFilter). */
  private liveArgs: ToolArgsFilter | null = null;
  private readonly seenTools = new Set<ToolKey>();
  /**
   * Tool calls without a block yet: waiting for their name (some upstreams send it after the first fragment),
   * or begun while another was live (emitted whole once the live one closes, B4 step 3).
   */
  private readonly pending = new Map<ToolKey, PendingTool>();
  /** Characters held in `held` and in pending calls' arguments (capped by maxHeldChars). */
  private heldChars = 0;
  private failure: string | null = null;
  /** The choice index read (index 0, else the first one seen); chunks of other choices are ignored. */
  private readonly choice = { settled: false, value: undefined as unknown };
  /** Per integer index, the call its deltas go to (key and id): a call reusing the index gets a key of its own. */
  private readonly indexed = new Map<number, { key: ToolKey; id: string }>();
  /** The key of the call whose index a new call just took over (set by indexedKey, read once by tool()). */
  private superseded: ToolKey | null = null;
  /** The call unindexed deltas go to (key, its id, whether it has a name). */
  private unindexed: { key: string; id: string; named: boolean } | null = null;
  /** Text and reasoning that came while tool calls were unfinished: emitted after them, so no call is cut. */
  private held: HeldText[] = [];
  private toolCalls = 0;
  /** The tool_use ids given so far (each answer's ids are unique, see clientToolId). */
  private readonly toolIds = new Set<string>();
  private finishReason: string | null = null;
  private upstreamStop: unknown = null;
  private refused = false;
  private usage: Usage | null = null;
  private outputTokens = 0;
  /**
   * `outputTokens` when the completion_tokens report billed (foldUsage) was read (after its chunk's own content, which servers
   * reporting running totals count in it). Output delivered after that report is not in it and is billed on top.
   */
  private outputAtReport = 0;
  /** The chunk being read reported completion_tokens: the mark is set once its content is counted. */
  private reportPending = false;
  /** The part of outputTokens still held back (not sent): a failed stream is billed for what was delivered. */
  private heldTokens = 0;
  private stopReason: StopReason | null = null;

  constructor(private readonly opts: StreamTranslatorOptions) {}

  /** The upstream's usage chunk (or a chunk carrying usage) has arrived. */
  get sawUsage(): boolean {
    return this.usage !== null;
  }

  /** True once a chunk carried a finish_reason: the upstream answer is whole even if [DONE] never comes. */
  get sawFinish(): boolean {
    return this.finishReason !== null;
  }

  /** message_start then a ping, as Anthropic starts its streams (only the first call emits them; push() calls it too). */
  start(): AnthropicStreamEvent[] {
    if (this.started) return [];
    this.started = true;
    const usage = { ...zeroUsage(), input_tokens: this.opts.inputTokens ?? 0 };
    return [{
      type: 'message_start',
      message: { id: this.opts.id, type: 'message', role: 'assistant', model: this.opts.requestedModel, content: [], stop_reason: null, stop_sequence: null, usage },
    }, { type: 'ping' }];
  }

  /** The message of the error event that ended the stream (a cap reached in push(), or fail()), else null. */
  get failedWith(): string | null {
    return this.failure;
  }

  /**
   * Feeds one parsed chunk. The upstream's fields are not trusted to have their types: text that is not a
   * string (or an array of text parts) is no text, a tool-call delta that is not an object is skipped, and only
   * one choice is read: index 0, else the first one seen (chunks of another choice would be merged into
   * the answer).
   */
  push(chunk: ChatCompletionChunk): AnthropicStreamEvent[] {
    if (this.ended) return [];
    const out = this.start();
    if (!chunk || typeof chunk !== 'object') return out;
    const choice = this.usageOf(chunk);
    if (!choice) {
      this.markReport();
      return out;
    }
    const d = (choice.delta && typeof choice.delta === 'object' ? choice.delta : {}) as ChatCompletionChunk['choices'][number]['delta'];
    const reasoning = textOf(d.reasoning_content) || textOf(d.reasoning);
    if (reasoning) this.text(out, 'thinking', reasoning);
    const content = textOf(d.content);
    if (content) this.text(out, 'text', content);
    const refusal = textOf(d.refusal);
    if (refusal) {
      this.refused = true;
      this.text(out, 'text', refusal);
    }
    if (Array.isArray(d.tool_calls)) for (const tc of d.tool_calls) if (tc && typeof tc === 'object') this.tool(out, tc);
    this.markReport();
    if (this.heldChars > (this.opts.maxHeldChars ?? MAX_HELD_CHARS)) {
      return [...out, ...this.fail('The upstream held back more output behind an unfinished tool call than the gateway keeps.')];
    }
    if (this.toolCalls > (this.opts.maxToolCalls ?? MAX_STREAM_TOOL_CALLS)) {
      return [...out, ...this.fail('The upstream sent more tool calls than the gateway relays in one answer.')];
    }
    if (choice.finish_reason) {
      // The first finish_reason is where the answer ended: a later one (a buggy upstream's second) does not turn
      // `length` into a whole-looking `stop`.
      if (this.finishReason === null) {
        this.finishReason = choice.finish_reason;
        this.upstreamStop = choice.stop_reason;
      }
      this.closeOpen(out);
    }
    return out;
  }

  /**
   * Takes a chunk's usage and returns the choice read. Also called for the error chunk that ends a stream, whose
   * content is not relayed but whose usage is what the upstream charged. Moonshot sends its usage inside the choice
   * that finishes (only the choice read counts: n > 1 is ignored).
   */
  usageOf(chunk: ChatCompletionChunk): ChatCompletionChunk['choices'][number] | undefined {
    const choice = firstChoice(chunk.choices, this.choice);
    this.noteUsage(chunk.usage ?? choice?.usage);
    return choice;
  }

  /**
   * Usage sent in several chunks (servers reporting running totals): each side keeps the report that bills the most
   * (foldUsage), never simply the last one, whose choice is the upstream's. A report without prompt_tokens (with its
   * cached parts) or completion_tokens keeps the earlier one: servers that send prompt_tokens early and
   * completion_tokens at the end had the prompt billed at the estimate; `usage: {}` keeps both.
   */
  private noteUsage(usage: ChatCompletionChunk['usage']): void {
    if (this.ended || !usage || typeof usage !== 'object') return;
    const { usage: folded, outputTaken } = foldUsage(this.usage, usageFromOpenAI(usage));
    // Output counted on top of the report billed starts after that report's chunk (outputAtReport).
    if (outputTaken) this.reportPending = true;
    this.usage = folded;
  }

  /** Sets the output mark of a completion_tokens report once its chunk's content is counted (see outputAtReport). */
  private markReport(): void {
    if (!this.reportPending) return;
    this.reportPending = false;
    this.outputAtReport = this.outputTokens;
  }

  /** Ends a properly finished upstream stream: message_delta (with usage) then message_stop. */
  finish(): AnthropicStreamEvent[] {
    if (this.ended) return [];
    const out = this.start();
    this.closeOpen(out);
    const { stop, stopSequence } = finalStopReason(this.finishReason, { refused: this.refused, toolCalls: this.toolCalls > 0, upstreamStop: this.upstreamStop, stopSequences: this.opts.stopSequences });
    this.stopReason = stop;
    this.ended = true;
    out.push({ type: 'message_delta', delta: { stop_reason: stop, stop_sequence: stopSequence }, usage: this.outcome().estimatedUsage });
    out.push({ type: 'message_stop' });
    return out;
  }

  /** Ends a broken stream with an `error` event (nothing after it). */
  fail(message: string, type = 'api_error'): AnthropicStreamEvent[] {
    if (this.ended) return [];
    this.ended = true;
    this.failed = true;
    this.failure = message;
    return [errorEvent(message, type)];
  }

  /** Current totals; final once finish() or fail() ran. */
  outcome(): StreamOutcome {
    // Counts the upstream left out or sent unusable are the estimates (never shown as 0, nor billed as max_tokens).
    // A usage of zeros for an answer that delivered output is no count (a proxy filling in 0 where its provider reported
    // nothing): the output is billed, and shown, on the estimate of what was delivered, like a count left out.
    this.markReport(); // a report in the chunk that ended the stream (an error chunk) covers everything before it
    let u = countsNothing(this.usage) && this.outputTokens > 0 ? { ...this.usage!, output_tokens: undefined as unknown as number } : this.usage;
    // Output delivered after the completion_tokens report billed is not in it (an upstream reporting usage early, then
    // going on): billed on top at the estimate, as native streams bill content after their message_delta. Before,
    // 10,000 characters after an early completion_tokens of 1 billed 1 output token. Held-back output a failed
    // stream never delivered is not added.
    const after = this.outputTokens - this.outputAtReport;
    const undelivered = this.failed ? Math.min(this.heldTokens, after) : 0;
    if (u && usableCount(u.output_tokens) && after - undelivered > 0 && Number.isSafeInteger(u.output_tokens + after)) {
      u = { ...u, output_tokens: u.output_tokens + after - undelivered };
    }
    const estimatedUsage = { ...(u ?? zeroUsage()), input_tokens: estimatedInput(u, this.opts.inputTokens),
      output_tokens: usableCount(u?.output_tokens) ? u.output_tokens : this.outputTokens - (this.failed ? this.heldTokens : 0) };
    return { usage: u, estimatedUsage, stopReason: this.stopReason, complete: this.ended && !this.failed, failed: this.failed };
  }

  private text(out: AnthropicStreamEvent[], kind: 'text' | 'thinking', piece: string): void {
    const tokens = estimateTextTokens(piece);
    this.outputTokens += tokens;
    if (this.liveTool === null && !this.pending.size) return this.emitText(out, kind, piece);
    this.heldChars += piece.length;
    this.heldTokens += tokens;
    const last = this.held.at(-1);
    if (last?.kind === kind) last.piece += piece;
    else this.held.push({ kind, piece });
  }

  private emitText(out: AnthropicStreamEvent[], kind: 'text' | 'thinking', piece: string): void {
    if (this.open?.kind !== kind) {
      this.closeOpen(out);
      const index = this.nextIndex++;
      this.open = { kind, index };
      out.push({ type: 'content_block_start', index, content_block: kind === 'text' ? { type: 'text', text: '' } : { type: 'thinking', thinking: '', signature: '' } });
    }
    out.push({ type: 'content_block_delta', index: this.open!.index, delta: kind === 'text' ? { type: 'text_delta', text: piece } : { type: 'thinking_delta', thinking: piece } });
  }

  private tool(out: AnthropicStreamEvent[], tc: ChatToolCallDelta): void {
    const fn = tc.function && typeof tc.function === 'object' ? tc.function : undefined;
    // Arguments sent as an object (objectArguments) are its JSON text; the chunk holding it was bounded as an event.
    const object = objectArguments(fn?.arguments);
    const raw = typeof fn?.arguments === 'string' ? fn.arguments : object ? JSON.stringify(object) : '';
    const name = typeof fn?.name === 'string' ? fn.name : '';
    // OpenAI's index is an integer; anything else is keyed by its text (an object or a fraction names no call
    // of its own, and never reaches an id). Without an index (Gemini's compatible API sends each call whole,
    // unindexed), a delta bringing another id, or a name when the call has one, starts a new call instead of
    // being appended to the previous call's arguments. The prefixes keep the three kinds of key apart.
    const key: ToolKey = Number.isSafeInteger(tc.index) ? this.indexedKey(tc.index as number, tc, name)
      : tc.index == null ? this.unindexedKey(tc, name) : `i:${String(tc.index)}`;
    if (this.superseded !== null) {
      if (this.superseded === this.liveTool) this.endLive(out);
      this.superseded = null;
    }
    if (key === this.liveTool) {
      // Only what continues one JSON object is sent (ToolArgsFilter), and only that counts as delivered.
      const args = this.liveArgs!.push(raw);
      this.outputTokens += estimateTextTokens(args);
      if (args) out.push({ type: 'content_block_delta', index: this.open!.index, delta: { type: 'input_json_delta', partial_json: args } });
      return;
    }
    let t = this.pending.get(key);
    if (!t) {
      // A fragment for an already closed call cannot be placed: dropped, and not counted as output either (a stream
      // without usage was billed for megabytes of arguments after the finish_reason that no client received).
      if (this.seenTools.has(key)) return;
      this.seenTools.add(key);
      t = { id: '', name: '', args: [], ordinal: this.toolCalls++, tokens: 0, filter: new ToolArgsFilter() };
      this.pending.set(key, t);
      this.heldChars += 64; // the entry itself, so that many empty calls count too
    }
    const args = t.filter.push(raw);
    const tokens = estimateTextTokens(args);
    this.outputTokens += tokens;
    if (typeof tc.id === 'string' && tc.id && !t.id) {
      t.id = tc.id;
      this.heldChars += tc.id.length;
    }
    if (name) {
      this.heldChars += name.length - t.name.length;
      t.name = name;
    }
    if (args) {
      t.args.push(args);
      this.heldChars += args.length;
      t.tokens += tokens;
      this.heldTokens += tokens;
    }
    if (!t.name || this.liveTool !== null) return;
    this.release(key, t);
    if (this.open) out.push({ type: 'content_block_stop', index: this.open.index });
    const index = this.nextIndex++;
    this.open = { kind: 'tool', index };
    this.liveTool = key;
    this.liveArgs = t.filter;
    this.emitTool(out, index, key, t);
  }

  /**
   * The key of a delta with an integer index: the index itself, unless that index's call already has an id and
   * the delta starts another call (another id, and a name). Ollama, and LiteLLM relaying it, give every call of
   * a parallel answer index 0: appending the second call to the first made `{"a":1}{"b":2}` and lost a call.
   * A name alone does not start a call (some servers repeat it on every fragment), nor does the same id again.
   */
  private indexedKey(index: number, tc: ChatToolCallDelta, name: string): ToolKey {
    const id = typeof tc.id === 'string' ? tc.id : '';
    const cur = this.indexed.get(index);
    if (!cur) {
      this.indexed.set(index, { key: index, id });
      return index;
    }
    if (id && name && cur.id && id !== cur.id) {
      const key = `r:${index}:${this.toolCalls}`;
      this.indexed.set(index, { key, id });
      this.superseded = cur.key;
      return key;
    }
    if (id && !cur.id) cur.id = id;
    return cur.key;
  }

  /** The key of an unindexed delta: the current unindexed call's, or a new one (see tool()). */
  private unindexedKey(tc: ChatToolCallDelta, name: string): ToolKey {
    const id = typeof tc.id === 'string' ? tc.id : '';
    const cur = this.unindexed;
    if (!cur || (id && cur.id && id !== cur.id) || (name && cur.named)) {
      this.unindexed = { key: `u:${this.toolCalls}`, id, named: !!name };
    } else {
      if (id) cur.id = id;
      if (name) cur.named = true;
    }
    return this.unindexed!.key;
  }

  /**
   * Ends the live call once no fragment can reach it any more (a new call took its index), so the next call streams
   * as soon as it starts instead of waiting for the end of the answer. Text held behind it follows it at once.
   * Not while other calls are pending: those may still get fragments, and the new call, streamed ahead of them,
   * would change the order of the calls (the same answer as JSON keeps the upstream's order); it waits behind them.
   */
  private endLive(out: AnthropicStreamEvent[]): void {
    if (!this.pending.size) this.closeOpen(out);
  }

  /** Drops a pending call (it is being emitted) and its share of `heldChars`. */
  private release(key: ToolKey, t: PendingTool): void {
    this.pending.delete(key);
    this.heldChars -= 64 + t.id.length + t.name.length + t.args.reduce((n, a) => n + a.length, 0);
    this.heldTokens -= t.tokens;
  }

  private emitTool(out: AnthropicStreamEvent[], index: number, key: ToolKey, t: PendingTool): void {
    // A derived id uses OpenAI's index only when it is a non-negative integer (ids stay [A-Za-z0-9_-]).
    const suffix = typeof key === 'number' && key >= 0 ? String(key) : `n${t.ordinal}`;
    const id = clientToolId(t.id, `toolu_${this.opts.id.replace(/^msg_/, '')}_${suffix}`, this.toolIds);
    const name = clientToolName(this.opts.toolNames, t.name);
    out.push({ type: 'content_block_start', index, content_block: { type: 'tool_use', id, name, input: {} } });
    if (t.args.length) out.push({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: t.args.join('') } });
  }

  /**
   * Closes the open block, then emits the tool calls still pending (each whole; one that never got its name
   * keeps name "", as a last resort), then the text and reasoning held behind them.
   */
  private closeOpen(out: AnthropicStreamEvent[]): void {
    // A call cut mid-object is closed where its arguments can be (ToolArgsFilter): the deltas add up to one object.
    const tail = this.open?.kind === 'tool' ? this.liveArgs?.closeAll() : '';
    if (tail) out.push({ type: 'content_block_delta', index: this.open!.index, delta: { type: 'input_json_delta', partial_json: tail } });
    if (this.open) out.push({ type: 'content_block_stop', index: this.open.index });
    this.open = null;
    this.liveTool = null;
    this.liveArgs = null;
    for (const [key, t] of this.pending) {
      const tail = t.filter.closeAll();
      if (tail) t.args.push(tail);
      const index = this.nextIndex++;
      this.emitTool(out, index, key, t);
      out.push({ type: 'content_block_stop', index });
    }
    this.pending.clear();
    const held = this.held;
    this.held = [];
    this.heldChars = 0;
    this.heldTokens = 0;
    for (const h of held) this.emitText(out, h.kind, h.piece);
    if (held.length) this.closeOpen(out);
  }
}
