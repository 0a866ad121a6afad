/**
 * Anthropic SSE pass-through with bookkeeping: events go out as they came, except message_start, whose
 * `message.model` becomes the model the client asked for. Usage is read from message_start and the
 * cumulative message_delta (later non-null counts override, as the SDK does).
 */
import { countsNothing, encodeSse, estimateTextTokens, errorFrame, zeroUsage, type SseEvent, type Usage } from '@gw/formats';
import type { DecodeContext, StreamDecoder, StreamResult } from '../adapter';
import { failureMessage, upstreamStreamError } from '../stream-errors';
import { pipeSse, sseTranscoder, type SseMachine } from '../sse-pipe';
import { AnthropicFramer } from './raw-pipe';
import { isCodeExecutionCall } from './code-execution';

const USAGE_KEYS = ['input_tokens', 'output_tokens', 'cache_creation_input_tokens', 'cache_read_input_tokens'] as const;
const usable = (n: unknown): n is number => typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;

/**
 * Copies the non-null counts of an upstream usage object into `into`. Anthropic's counts are cumulative, so a
 * usable count never lowers one already reported (`peak` holds the highest usable count of each): a hostile or
 * buggy upstream whose last message_delta says less than an earlier event cannot bill less than the client was
 * shown.
 */
function mergeUsage(into: Usage, peak: Usage, from: Record<string, unknown> | undefined): void {
  if (!from || typeof from !== 'object') return;
  // A present non-number stays visible as NaN so billing flags and replaces it instead of billing 0.
  for (const k of USAGE_KEYS) {
    const v = from[k];
    if (usable(v)) into[k] = peak[k] = Math.max(peak[k], v);
    else if (typeof v === 'number') into[k] = v;
    else if (v !== undefined && (v !== null || k === 'input_tokens' || k === 'output_tokens')) into[k] = Number.NaN;
  }
  // The TTL split of the cache writes (5 minutes / 1 hour) is billed at different prices: keep the latest one,
  // each part never below one reported before (a split without a total is the writes billed, relay's cacheWritesOf).
  const split = from.cache_creation as Record<string, unknown> | null | undefined;
  if (split !== undefined && split !== null) {
    let kept: unknown = split;
    if (typeof split === 'object') {
      const parts = peak as { cache_creation_5m?: number; cache_creation_1h?: number };
      for (const [key, field] of [['cache_creation_5m', 'ephemeral_5m_input_tokens'], ['cache_creation_1h', 'ephemeral_1h_input_tokens']] as const) {
        const before = parts[key] ?? 0;
        const v = split[field];
        if (usable(v)) parts[key] = Math.max(before, v);
        // A part left out (or lowered) keeps the one reported before; one present but unusable stays visible.
        if (before > 0 && (v === undefined || v === null || (usable(v) && v < before))) kept = { ...(kept as object), [field]: before };
      }
    }
    (into as Record<string, unknown>).cache_creation = kept;
  }
  // Web searches are billed per search; the count is cumulative: the latest event that carries it wins (never below
  // an earlier usable one), so a stream cut before its last message_delta bills the searches reported so far.
  const tools = from.server_tool_use as Record<string, unknown> | null | undefined;
  if (tools && typeof tools === 'object' && tools.web_search_requests !== undefined && tools.web_search_requests !== null) {
    const w = tools.web_search_requests;
    const before = (peak as { web_search?: number }).web_search ?? 0;
    if (usable(w)) (peak as { web_search?: number }).web_search = Math.max(before, w);
    (into as Record<string, unknown>).server_tool_use = { web_search_requests: usable(w) ? Math.max(before, w) : w };
  }
}

/**
 * Whether an event's data may hold a usage object a client reads: a `"usage"` key, or an escape of an ASCII letter
 * or `_` (`us\u0061ge` is usage once parsed; `\u00e9`, `\u003c` and control characters spell no key: see hasAsciiEscape).
 * Checked on events the machine would not parse otherwise.
 */
export function mayCarryUsage(data: string): boolean {
  return data.includes('"usage"') || /\\u00[4-7]/.test(data);
}

/**
 * Whether an event's data may be a message_start a client reads (by its `type`) though the event is named otherwise:
 * a bare `"message_start"` string (inside a JSON string its quotes would be escaped) or an ASCII escape. Parsed then.
 */
export function mayBeStart(data: string): boolean {
  return data.includes('"message_start"');
}

/**
 * Whether an event's data may be a content_block_start a client reads (by its `type`) though the event is named
 * otherwise: a bare `"content_block_start"` string (an ASCII escape already makes mayCarryUsage true). Parsed then, so a
 * code-execution call (billed per call) or a search's results sent under another name are counted too.
 */
export function mayBeBlockStart(data: string): boolean {
  return data.includes('"content_block_start"');
}

/** The client's error for an upstream that starts a second message (see AnthropicStreamMachine.secondStart). */
export const SECOND_START = 'The upstream stream started a second message.';

export class AnthropicStreamMachine implements SseMachine {
  stopped = false;
  private readonly usage = zeroUsage();
  /** The highest usable count of each kind reported so far (see mergeUsage). */
  private readonly peak = zeroUsage();
  private sawDelta = false;
  /** Whether any event carried input_tokens; and the message_delta output_tokens (message_start's is only a start). */
  private inputReported = false;
  private outputReported = false;
  complete = false;
  private stopReason: string | null = null;
  private estimatedOutput = 0;
  /**
   * `estimatedOutput` when the latest message_delta reporting output_tokens was read. Its count covers the answer up to
   * there (Anthropic sends it after the last content block); content an upstream sends after it is not in it and is
   * billed on top, at the estimate (before, an upstream sending its message_delta first had the whole answer billed
   * at that early count: 4,000 characters for 1 output token).
   */
  private estimatedAtReport = 0;
  /**
   * Web searches whose results reached the client (web_search_tool_result blocks), and an estimate of the input
   * those results add: Anthropic reports both only in the final message_delta, so a stream cut before it (the
   * client gone, a stall, a revoked key) would bill no search and only the pre-search input.
   */
  private deliveredSearches = 0;
  private searchInputEstimate = 0;
  /**
   * Code-execution calls (server_tool_use blocks named code_execution, bash_code_execution or
   * text_editor_code_execution) whose content_block_start was delivered: billed per call, the usage object
   * having no count for them; a stream cut early bills the calls delivered so far.
   */
  private codeExecutionCalls = 0;
  private error: string | undefined;
  /**
   * A message_start (by its name or its data's `type`) was forwarded. A second one is never forwarded: the official
   * SDKs throw their own "Unexpected event order" on it, so the stream ends there with the gateway's error, billed
   * for what was delivered, an upstream fault (like any other malformed upstream stream).
   */
  private started = false;

  constructor(private readonly ctx: DecodeContext) {}

  /** message_stop arrived: nothing of the answer is missing but the upstream's close. */
  get whole(): boolean {
    return this.complete;
  }

  onEvent(ev: SseEvent): string {
    // Nothing follows message_stop: whatever an upstream still sends is dropped (the relay closes it soon).
    if (this.complete) return '';
    const name = ev.event ?? '';
    // The official SDKs read an event by its data's `type` (its name only picks which events to read), and data-only
    // clients read only the data: usage in an event named otherwise (content_block_delta, ping, none) reaches the
    // client all the same, so it is billed too. Such an event is forwarded as sent.
    if (name !== 'message_start' && name !== 'message_delta' && name !== 'error'
      && (mayCarryUsage(ev.data) || mayBeStart(ev.data) || (name !== 'content_block_start' && mayBeBlockStart(ev.data)))) {
      const data = safeParse(ev.data);
      if (data?.type === 'message_start' && this.secondStart()) return this.fail(SECOND_START);
      this.account(data, '');
      if (name !== 'content_block_start' && data?.type === 'content_block_start') this.countBlock(data.content_block, ev.data);
    }
    switch (name) {
      case 'message_start': {
        if (this.secondStart()) return this.fail(SECOND_START);
        const data = safeParse(ev.data);
        this.account(data, name);
        if (data?.message) data.message.model = this.ctx.requestedModel;
        if (data?.message) return encodeSse(name, JSON.stringify(data));
        break;
      }
      case 'content_block_delta':
        this.countDelta(ev.data);
        break;
      case 'content_block_start':
        // A \u escape may spell either name (`code\u005fexecution`): such a start is parsed too.
        if (ev.data.includes('web_search_tool_result') || ev.data.includes('code_execution') || ev.data.includes('\\u')) this.blockStart(ev.data);
        break;
      case 'message_delta': {
        const data = safeParse(ev.data);
        this.account(data, name);
        this.sawDelta = true; // even unreadable: the usage then counts as reported without counts (estimated)
        if (data?.delta?.stop_reason !== undefined) this.stopReason = data.delta.stop_reason;
        break;
      }
      case 'message_stop':
        this.complete = true;
        break;
      case 'error': {
        // Never forwarded as sent: an upstream's error text can carry its key. Only a known type survives.
        const e = upstreamStreamError(safeParse(ev.data)?.error?.type);
        this.error = e.message;
        this.stopped = true;
        return errorFrame(e.message, e.type);
      }
    }
    return encodeSse(ev.event, ev.data);
  }

  /** Whether a message_start was forwarded before this one (the first is remembered). */
  private secondStart(): boolean {
    if (this.started) return true;
    this.started = true;
    return false;
  }

  /**
   * Reads the usage of an event that is a message_start or message_delta by its name or by its data's `type`
   * (either way a client may read it as one).
   */
  private account(data: any, name: string): void {
    if (!data || typeof data !== 'object') return;
    const type = data.type;
    if (name === 'message_start' || type === 'message_start') {
      const u = data.message?.usage;
      mergeUsage(this.usage, this.peak, u);
      this.inputReported ||= u?.input_tokens !== undefined;
    }
    if (name === 'message_delta' || type === 'message_delta') {
      mergeUsage(this.usage, this.peak, data.usage);
      this.inputReported ||= data.usage?.input_tokens !== undefined;
      if (data.usage?.output_tokens !== undefined) {
        this.outputReported = true;
        this.estimatedAtReport = this.estimatedOutput;
      }
      this.sawDelta = true;
    }
  }

  /**
   * Adds a content_block_delta's text to the output estimate (used only when the upstream never reports
   * usage). Reads the delta's string without parsing the event: it is the most frequent one by far.
   */
  countDelta(data: string): void {
    this.estimatedOutput += estimateTextTokens(deltaPiece(data));
  }

  /**
   * A content_block_start that may open a web_search_tool_result block or a code-execution call (parsed only
   * when it names one of them).
   */
  blockStart(data: string): void {
    this.countBlock(safeParse(data)?.content_block, data);
  }

  /** Counts a started content block that is billed: a code-execution call, or a web search's results (`data`: its event's). */
  private countBlock(block: any, data: string): void {
    if (isCodeExecutionCall(block)) {
      this.codeExecutionCalls++;
      return;
    }
    if (block?.type !== 'web_search_tool_result') return;
    this.deliveredSearches++;
    this.searchInputEstimate += estimateTextTokens(data);
  }

  /** The same, for a framer that estimated the tokens itself. */
  addOutputEstimate(tokens: number): void {
    this.estimatedOutput += tokens;
  }

  onEnd(): string {
    if (this.complete) return '';
    return this.fail('The upstream stream ended unexpectedly.');
  }

  onFailure(err?: unknown): string {
    if (this.complete) return '';
    return this.fail(failureMessage(err));
  }

  /**
   * Usage as reported once a message_delta came (a count it never reported stays undefined: billed on the
   * estimate, flagged `estimated`, never as 0), else null. The estimate always holds usable counts: an
   * unusable or missing output is what was delivered (so an invalid count is not billed at max_tokens).
   */
  result(): Omit<StreamResult, 'firstByteAt'> {
    const usage = this.sawDelta ? { ...this.usage } : null;
    if (usage && !this.inputReported) (usage as Partial<Usage>).input_tokens = undefined;
    if (usage && !this.outputReported) (usage as Partial<Usage>).output_tokens = undefined;
    const delivered = Math.max(this.peak.output_tokens, this.estimatedOutput);
    const after = this.estimatedOutput - this.estimatedAtReport;
    if (usage && this.outputReported && usable(usage.output_tokens) && after > 0 && Number.isSafeInteger(usage.output_tokens + after)) usage.output_tokens += after;
    // A usage of zeros for an answer that delivered output is no count (a proxy filling in 0 where its provider reported
    // nothing): the output is billed on the estimate of what was delivered, like a count left out, never as free.
    if (usage && this.outputReported && countsNothing(usage) && this.estimatedOutput > 0) (usage as Partial<Usage>).output_tokens = undefined;
    const output = usage && this.outputReported && usable(usage.output_tokens) ? usage.output_tokens : delivered;
    // Input as reported (an unusable count stays visible for billing to flag and replace by the reserved bound; none
    // reported stays undefined and is estimated): a stream cut before its message_delta is billed on this.
    const estimatedUsage = { ...this.usage, input_tokens: this.inputReported ? this.usage.input_tokens : (undefined as unknown as number), output_tokens: output };
    // Cut before the message_delta that reports them: the searches delivered, and the input their results add.
    if (!this.sawDelta && this.deliveredSearches > 0) {
      const reported = (this.usage as { server_tool_use?: { web_search_requests?: unknown } }).server_tool_use?.web_search_requests;
      (estimatedUsage as Record<string, unknown>).server_tool_use = { web_search_requests: Math.max(usable(reported) ? reported : 0, this.deliveredSearches) };
      if (usable(estimatedUsage.input_tokens)) estimatedUsage.input_tokens += this.searchInputEstimate;
    }
    const { input_tokens, cache_read_input_tokens, cache_creation_input_tokens } = this.peak;
    return { usage, estimatedUsage, stopReason: this.stopReason, complete: this.complete && !this.error, error: this.error, codeExecutionCalls: this.codeExecutionCalls,
      peak: { input_tokens, cache_read_input_tokens, cache_creation_input_tokens } };
  }

  private fail(message: string): string {
    this.error = message;
    this.stopped = true;
    return errorFrame(message);
  }
}

const PIECE_KEYS = ['"text":"', '"partial_json":"', '"thinking":"'];

/** The string of a content_block_delta (escapes left as they are), or '' when it has none. */
function deltaPiece(data: string): string {
  for (const k of PIECE_KEYS) {
    const at = data.lastIndexOf(k);
    if (at === -1) continue;
    const end = data.lastIndexOf('"');
    return end > at + k.length ? data.slice(at + k.length, end) : '';
  }
  return '';
}

function safeParse(s: string): any {
  try {
    return JSON.parse(s);
  } catch {
    return undefined;
  }
}

/** Stream decoder of the anthropic adapter. */
export function createAnthropicStreamDecoder(ctx: DecodeContext): StreamDecoder {
  const machine = new AnthropicStreamMachine(ctx);
  let firstByteAt: number | undefined;
  const now = ctx.now ?? Date.now;
  const transcoder = sseTranscoder(machine, () => (firstByteAt = now()), new AnthropicFramer(machine, ctx.maxEventBytes));
  return {
    transcoder,
    pipe: (upstream) => pipeSse(upstream, transcoder),
    result: () => ({ ...machine.result(), firstByteAt }),
  };
}
