/** Mappings shared by the non-streaming and streaming OpenAI → Anthropic translators (as in OpenAI's Chat Completions API). */
import type { StopReason, Usage } from '../anthropic/response';
import type { CompletionUsage } from '../openai/types';

/** finish_reason → stop_reason. content_filter becomes refusal (a design choice, B2). Unknown → end_turn. */
export function mapFinishReason(reason: string | null | undefined): StopReason {
  switch (reason) {
    case 'length': return 'max_tokens';
    case 'tool_calls':
    case 'function_call': return 'tool_use';
    case 'content_filter': return 'refusal';
    default: return 'end_turn';
  }
}

/**
 * A usable count as is; absent = 0 (a null main count is unusable); anything else NaN, so billing flags and
 * replaces it rather than billing 0. An absent main count is undefined: billed on the estimate (`estimated`).
 */
const int = (n: unknown, main = false): number =>
  (n === undefined ? (main ? (undefined as unknown as number) : 0)
    : n === null && !main ? 0 : typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 ? n : Number.NaN);

/**
 * OpenAI usage → Anthropic usage (cache reads: `prompt_tokens_details.cached_tokens`, else DeepSeek's
 * `prompt_cache_hit_tokens`, else Moonshot's `cached_tokens`). OpenAI's prompt_tokens includes cached tokens; Anthropic's input_tokens
 * does not, so cache reads and writes are subtracted (clamped at 0 against inconsistent upstreams). A main
 * count the upstream left out stays undefined (see `int`); without prompt_tokens the cached counts cannot be
 * placed inside it and are kept as reported.
 */
export function usageFromOpenAI(u: CompletionUsage): Usage {
  const prompt = int(u.prompt_tokens, true);
  const known = prompt !== undefined;
  // Cached counts are part of prompt_tokens. Reads above it cannot be true: clamped, the whole prompt was billed as
  // cache reads, the cheapest reading of a report no upstream bills by; they are unusable instead (below).
  // DeepSeek reports its cache hits as prompt_cache_hit_tokens, Moonshot as a top-level cached_tokens (parts of
  // prompt_tokens too), without details: read as input, they were billed at the full input price.
  const cached = u.prompt_tokens_details?.cached_tokens ?? u.prompt_cache_hit_tokens ?? u.cached_tokens;
  const cacheRead = known && !(int(cached) <= prompt) ? Number.NaN : int(cached);
  const cacheWrite = known ? Math.min(int(u.prompt_tokens_details?.cache_write_tokens), prompt - (cacheRead || 0)) : int(u.prompt_tokens_details?.cache_write_tokens);
  // An unusable cached count (NaN: flagged `invalid`, billed as none) leaves the prompt whole as uncached input,
  // the dearest reading of a valid prompt_tokens, rather than making the valid count unusable too.
  return {
    input_tokens: known ? prompt - (cacheRead || 0) - (cacheWrite || 0) : prompt,
    output_tokens: withReasoning(u, prompt, int(u.completion_tokens, true)),
    cache_creation_input_tokens: cacheWrite,
    cache_read_input_tokens: cacheRead,
  };
}

/**
 * The output count, reasoning included. OpenAI counts reasoning inside completion_tokens (reasoning_tokens is a part of
 * it); some compatible servers in front of Gemini report the thinking only in reasoning_tokens (and total_tokens), so
 * completion_tokens alone billed the thinking as free. Reasoning is added when it cannot be a part of completion_tokens
 * (larger than it) or when total_tokens says it is not (prompt + completion + reasoning). An unusable or absent
 * completion count stays as it is (billing flags or estimates it).
 */
function withReasoning(u: CompletionUsage, prompt: number | undefined, completion: number): number {
  if (!usableCount(completion)) return completion;
  const r = u.completion_tokens_details?.reasoning_tokens;
  const apart = usableCount(r) && r > 0 && (r > completion || (usableCount(prompt) && u.total_tokens === prompt + completion + r));
  const out = apart && Number.isSafeInteger(completion + r) ? completion + r : completion;
  // A total above its parts is thinking a conversion left out of both counts (Gemini's thoughtsTokenCount, dropped by
  // any-llm and others): the gap is output, as the upstream bills it. Billed 0 before (prompt 20, completion 198, total
  // 623: 405 thinking tokens free). A total below its parts is no reading of them: the parts stand. A gap that is exactly
  // the reported cache counts is those (Bedrock's totalTokens adds its cache reads and writes to an inputTokens without
  // them, passed on as prompt_tokens): billed as output, cache reads cost 50 times their price.
  const total = u.total_tokens;
  if (!usableCount(prompt) || !usableCount(total) || total - prompt <= out) return out;
  const cache = int(u.prompt_tokens_details?.cached_tokens ?? u.prompt_cache_hit_tokens ?? u.cached_tokens) + int(u.prompt_tokens_details?.cache_write_tokens);
  return cache > 0 && total === prompt + out + cache ? out : total - prompt;
}

/**
 * The input count a client is shown (and billed, relay's uncachedOf) when the upstream's is missing or unusable: the
 * estimate of the whole prompt less the cache reads and writes it did count, which are a part of that prompt.
 */
export function estimatedInput(u: Usage | null | undefined, inputTokens: number | undefined): number {
  if (usableCount(u?.input_tokens)) return u.input_tokens;
  const cached = (usableCount(u?.cache_read_input_tokens) ? u.cache_read_input_tokens : 0) + (usableCount(u?.cache_creation_input_tokens) ? u.cache_creation_input_tokens : 0);
  return Math.max(0, (inputTokens ?? 0) - cached);
}

/** A count billing can use as it is (the test guardUsage applies). */
export const usableCount = (n: unknown): n is number => typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;

/**
 * Which stop sequence ended the output, when it can be told. OpenAI never says (and strips the match from
 * the text), so this only succeeds with servers that report the matched string in `choice.stop_reason`
 * (vLLM and others) and only for a string the client asked for. Otherwise null, and the stop_reason stays
 * end_turn: guessing from the text would misreport natural endings.
 */
export function matchedStopSequence(upstreamStopReason: unknown, requested: readonly string[] | undefined): string | null {
  if (typeof upstreamStopReason !== 'string' || !requested) return null;
  return requested.includes(upstreamStopReason) ? upstreamStopReason : null;
}

/**
 * The stop_reason (and matched stop sequence) of a whole answer: tool_use exactly when it holds a tool call. Tool calls ending in "stop" (what OpenAI
 * sends when tool_choice names a function, and some compatible servers always) still end in tool_use:
 * clients' agent loops stop on end_turn and would skip the calls. length and refusal are kept as they are.
 */
export function finalStopReason(finishReason: string | null | undefined,
  o: { refused: boolean; toolCalls: boolean; upstreamStop: unknown; stopSequences?: readonly string[] }): { stop: StopReason; stopSequence: string | null } {
  let stop = o.refused ? 'refusal' : mapFinishReason(finishReason);
  if (stop === 'end_turn' && o.toolCalls) stop = 'tool_use';
  // And the other way: tool_use with no tool_use block is an answer Anthropic never gives; an agent loop would
  // wait for tool results that cannot exist.
  if (stop === 'tool_use' && !o.toolCalls) stop = 'end_turn';
  const stopSequence = stop === 'end_turn' ? matchedStopSequence(o.upstreamStop, o.stopSequences) : null;
  return { stop: stopSequence === null ? stop : 'stop_sequence', stopSequence };
}

/** Text an upstream sent: a string, or an array of text parts (`[{type:"text",text}]`, as some compatible servers send); anything else is no text. */
export function textOf(v: unknown): string {
  if (typeof v === 'string') return v;
  if (!Array.isArray(v)) return '';
  let s = '';
  for (const p of v) if (p && typeof p === 'object' && typeof (p as { text?: unknown }).text === 'string') s += (p as { text: string }).text;
  return s;
}

/**
 * Anthropic's tool_use id alphabet, at most 128 characters (its own ids are about 30): an answer's ids are kept
 * to tell repeats, so an upstream's megabyte ids are replaced rather than held 10,000 times.
 */
const TOOL_ID = /^[A-Za-z0-9_-]{1,128}$/;

/**
 * The tool_use id of an upstream call: its own id when Anthropic would accept it (TOOL_ID) and no earlier
 * call of the answer has it, else `derived` (made unique). Kimi's compatible API names calls `functions.get:0`
 * and some servers repeat one id for every call: a client replaying either to an Anthropic channel got a 400,
 * and tool results answering one id twice cannot be told apart. A replaced id stays consistent across the
 * conversation: the client sends it back in both the call and its result.
 */
export function clientToolId(upstreamId: unknown, derived: string, used: Set<string>): string {
  let id = typeof upstreamId === 'string' && TOOL_ID.test(upstreamId) && !used.has(upstreamId) ? upstreamId : derived;
  while (used.has(id)) id += '_';
  used.add(id);
  return id;
}

/**
 * The client's name of an upstream tool name: renamed back through the request's map, only by its own keys (a
 * plain object's `constructor` or `__proto__` is no tool); a name that is not a string is "".
 */
export function clientToolName(map: Readonly<Record<string, string>> | undefined, name: unknown): string {
  if (typeof name !== 'string') return '';
  return map && Object.hasOwn(map, name) ? map[name]! : name;
}

/**
 * The answer's choice: the one with index 0 (or none: servers that leave it out), as the gateway never asks
 * for n > 1, else the first. A stream passes the index it settled on (`index`): only that choice is read from
 * then on, as a chunk of another choice would be merged into the answer.
 */
export function firstChoice<T extends { index?: unknown }>(choices: readonly (T | null | undefined)[] | undefined,
  index: { settled: boolean; value: unknown } | null = null): T | undefined {
  if (!Array.isArray(choices)) return undefined;
  const same = (a: unknown, b: unknown) => a === b || (a == null && b == null);
  let first: T | undefined;
  for (const c of choices) {
    if (!c || typeof c !== 'object') continue;
    if (index?.settled) {
      if (same(c.index, index.value)) return c;
      continue;
    }
    if (c.index === 0 || c.index == null) return settle(c, index);
    first ??= c;
  }
  return first && settle(first, index);
}

function settle<T extends { index?: unknown }>(c: T, index: { settled: boolean; value: unknown } | null): T {
  if (index) {
    index.settled = true;
    index.value = c.index;
  }
  return c;
}

/**
 * Tool-call arguments sent as a JSON object rather than OpenAI's string (llama.cpp's server with --tool-args-object,
 * and other compatible servers): the object itself, else undefined. Dropped, the call the model made reached the
 * client with input `{}`. An array or any other value is still no input.
 */
export function objectArguments(v: unknown): Record<string, unknown> | undefined {
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}
