/**
 * The Anthropic Messages response and stream events (as in Anthropic's Messages API). Schemas (not only types)
 * so the OpenAPI document can describe the response.
 */
import { Type, type Static } from '@sinclair/typebox';

const open = { additionalProperties: true } as const;

/** Token usage as the gateway meters it. `input_tokens` excludes cached tokens (A5). */
export const UsageSchema = Type.Object(
  {
    input_tokens: Type.Integer({ description: 'Uncached input tokens.' }),
    output_tokens: Type.Integer({ description: 'Output tokens.' }),
    cache_creation_input_tokens: Type.Integer({ description: 'Input tokens written to the prompt cache.' }),
    cache_read_input_tokens: Type.Integer({ description: 'Input tokens read from the prompt cache.' }),
  },
  { ...open, description: 'Token usage.' },
);
export type Usage = Static<typeof UsageSchema>;

export const STOP_REASONS = ['end_turn', 'max_tokens', 'stop_sequence', 'tool_use', 'pause_turn', 'refusal', 'model_context_window_exceeded'] as const;
export type StopReason = (typeof STOP_REASONS)[number];

export const ResponseBlockSchema = Type.Object(
  { type: Type.String({ description: 'text, tool_use, thinking, ...' }) },
  { ...open, description: 'A response content block ({type:"text", text} or {type:"tool_use", id, name, input}, ...).' },
);

/** The non-streaming response of `POST /v1/messages`. */
export const AnthropicMessageSchema = Type.Object(
  {
    id: Type.String({ description: 'Message id (msg_...).' }),
    type: Type.Literal('message'),
    role: Type.Literal('assistant'),
    content: Type.Array(ResponseBlockSchema),
    model: Type.String({ description: 'The model the client asked for.' }),
    stop_reason: Type.Union([Type.String(), Type.Null()], { description: 'end_turn, max_tokens, stop_sequence, tool_use, pause_turn or refusal.' }),
    stop_sequence: Type.Union([Type.String(), Type.Null()], { description: 'The stop sequence that matched, if known.' }),
    usage: UsageSchema,
  },
  { ...open, description: 'Anthropic Messages response.' },
);

/** A response block as the gateway builds it. */
export type ResponseBlock =
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: unknown }
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: string; [k: string]: unknown };

export interface AnthropicMessage {
  id: string;
  type: 'message';
  role: 'assistant';
  content: ResponseBlock[];
  model: string;
  stop_reason: StopReason | null;
  stop_sequence: string | null;
  usage: Usage;
  [k: string]: unknown;
}

/** Deltas inside `content_block_delta`. */
export type BlockDelta =
  | { type: 'text_delta'; text: string }
  | { type: 'input_json_delta'; partial_json: string }
  | { type: 'thinking_delta'; thinking: string }
  | { type: 'signature_delta'; signature: string };

/** One Anthropic SSE event; its `type` is also the SSE `event:` name. */
export type AnthropicStreamEvent =
  | { type: 'message_start'; message: AnthropicMessage }
  | { type: 'content_block_start'; index: number; content_block: ResponseBlock }
  | { type: 'content_block_delta'; index: number; delta: BlockDelta }
  | { type: 'content_block_stop'; index: number }
  | { type: 'message_delta'; delta: { stop_reason: StopReason | null; stop_sequence: string | null }; usage: Usage }
  | { type: 'message_stop' }
  | { type: 'ping' }
  | { type: 'error'; error: { type: string; message: string } };

/** A zero usage, the starting point of every count. */
export const zeroUsage = (): Usage => ({ input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 });

/** A count that counts nothing: 0, or not given. */
export const noCount = (n: unknown): boolean => n === undefined || n === null || n === 0;

/**
 * Whether a usage counts nothing at all: input, output, cache reads and writes each 0 (or absent). No answer that
 * delivered anything costs that (every request has a prompt), so such a report is no count: proxies fill it in where
 * their provider reported nothing. Billing treats it like usage left out (estimated), never as free.
 */
export function countsNothing(u: Partial<Usage> | null | undefined): boolean {
  if (!u) return false;
  return noCount(u.input_tokens) && noCount(u.output_tokens) && noCount(u.cache_read_input_tokens) && noCount(u.cache_creation_input_tokens)
    && (u.input_tokens === 0 || u.output_tokens === 0);
}
