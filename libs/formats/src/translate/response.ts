/** OpenAI chat completion → Anthropic message (as in OpenAI's Chat Completions API). Pure apart from the random message id. */
import { ANSWER_MAX_DEPTH, ANSWER_MAX_VALUES, jsonValueCount, newMessageId } from '@gw/core';
import type { AnthropicMessage, ResponseBlock, Usage } from '../anthropic/response';
import { zeroUsage } from '../anthropic/response';
import type { ChatCompletion, ChatToolCall } from '../openai/types';
import { estimateTextTokens } from '../tokens';
import { ToolArgsFilter } from './tool-args';
import { clientToolId, clientToolName, estimatedInput, finalStopReason, firstChoice, objectArguments, textOf, usableCount, usageFromOpenAI } from './common';

export interface FromOpenAIOptions {
  /** The model the client asked for; echoed in `model`. */
  requestedModel: string;
  /** The request's stop_sequences, to recognise a reported stop string. */
  stopSequences?: readonly string[];
  /** Fixed id (tests); defaults to a fresh `msg_…`. */
  id?: string;
  /** Upstream tool name → the client's, for names renamed to fit OpenAI (toolNameMap). */
  toolNames?: Readonly<Record<string, string>>;
  /** Input tokens estimated before the call: the input of `estimatedUsage` when the upstream reports none. */
  inputTokens?: number;
}

export interface TranslatedMessage {
  message: AnthropicMessage;
  /** null when the upstream sent no usage (message.usage is then `estimatedUsage`). */
  usage: Usage | null;
  /** `usage` if known, else the input pre-count plus an output estimate from the content (what is billed). */
  estimatedUsage: Usage;
  /** Tool calls whose arguments were not valid JSON and became `{}`: worth a log line. */
  badToolArguments: string[];
}

/**
 * Translates a completion. Tool-call arguments that are not valid JSON become `{}` (listed in
 * `badToolArguments`) rather than failing a response the client already paid for.
 */
export function fromOpenAICompletion(c: ChatCompletion, opts: FromOpenAIOptions): TranslatedMessage {
  const choice = firstChoice(c.choices);
  const msg = choice?.message;
  const id = opts.id ?? newMessageId();
  const content: ResponseBlock[] = [];
  const badToolArguments: string[] = [];
  // Reasoning comes first, as Anthropic orders thinking before text. The signature is empty: there is
  // nothing for the client to verify, and translated requests drop thinking blocks sent back.
  // Fields of the wrong type are no text (textOf): an Anthropic text is always a string.
  const reasoning = textOf(msg?.reasoning_content) || textOf(msg?.reasoning);
  if (reasoning) content.push({ type: 'thinking', thinking: reasoning, signature: '' });
  const text = textOf(msg?.content);
  if (text) content.push({ type: 'text', text });
  const refusal = textOf(msg?.refusal);
  if (refusal) content.push({ type: 'text', text: refusal });
  // tool_calls that is not an array, or an entry that is not an object, is skipped as a stream's would be.
  const calls = (Array.isArray(msg?.tool_calls) ? msg.tool_calls : []).filter((c) => c && typeof c === 'object');
  const usedIds = new Set<string>();
  // The answer's own values were bounded before its parse; its arguments, strings in it, are parsed here.
  const budget = { left: ANSWER_MAX_VALUES };
  calls.forEach((call, i) => {
    // An id or name that is not a string is replaced, never passed on as a number or object; a missing id (or one
    // Anthropic would refuse, clientToolId) gets one derived from the message id, as streamed calls do.
    const callId = clientToolId(call.id, `toolu_${id.replace(/^msg_/, '')}_${i}`, usedIds);
    const fn: Partial<ChatToolCall['function']> = call.function && typeof call.function === 'object' ? call.function : {};
    const args = typeof fn.arguments === 'string' ? fn.arguments : undefined;
    // An object was counted with the answer's values before its parse; the string form is parsed (and counted) here.
    const object = objectArguments(fn.arguments);
    if (fn.arguments !== undefined && args === undefined && !object) badToolArguments.push(callId);
    content.push({ type: 'tool_use', id: callId, name: clientToolName(opts.toolNames, fn.name), input: object ?? parseArguments(args, callId, badToolArguments, budget) });
  });

  const { stop: stopReason, stopSequence } = finalStopReason(choice?.finish_reason, {
    refused: !!refusal, toolCalls: calls.length > 0, upstreamStop: choice?.stop_reason, stopSequences: opts.stopSequences,
  });

  const usage = c.usage ? usageFromOpenAI(c.usage) : null;
  // The client sees what it is billed (as a stream's message_delta does), not zeros: a count the upstream left
  // out or sent unusable is the estimate.
  const estimatedUsage = { ...(usage ?? zeroUsage()), input_tokens: estimatedInput(usage, opts.inputTokens),
    output_tokens: usableCount(usage?.output_tokens) ? usage.output_tokens : estimateTextTokens(JSON.stringify(content)) };
  const message: AnthropicMessage = {
    id,
    type: 'message',
    role: 'assistant',
    model: opts.requestedModel,
    content,
    stop_reason: stopReason,
    stop_sequence: stopSequence,
    usage: estimatedUsage,
  };
  return { message, usage, estimatedUsage, badToolArguments };
}

/**
 * Parses tool arguments; anything but a JSON object (or one followed by more) becomes `{}` (Anthropic's input is always an object), and so do
 * arguments past the answer's value `budget` (shared by its calls) or nested too deep, unparsed: 24 MiB of `{},` in
 * one call's arguments was 8 million objects to build.
 */
export function parseArguments(args: string | undefined, id: string, bad: string[], budget: { left: number }): Record<string, unknown> {
  if (!args) return {};
  const values = jsonValueCount(Buffer.from(args), ANSWER_MAX_DEPTH, budget.left);
  if (values < 0) {
    bad.push(id);
    return {};
  }
  budget.left -= values;
  try {
    const v = JSON.parse(args);
    if (v && typeof v === 'object' && !Array.isArray(v)) return v;
  } catch {
    // A whole object followed by more (trailing text, a second call's arguments run into it) is that object, and
    // arguments cut mid-object are their longest prefix ending a value, closed, as the stream of the same answer
    // delivers them (ToolArgsFilter); still worth the log line.
    const head = new ToolArgsFilter();
    const object = head.push(args) + head.closeAll();
    bad.push(id);
    return object ? JSON.parse(object) : {};
  }
  bad.push(id);
  return {};
}
