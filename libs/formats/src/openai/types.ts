/**
 * OpenAI Chat Completions wire types (as in OpenAI's Chat Completions API), only the parts the gateway reads or writes.
 * Plain interfaces: the gateway never serves these, it only sends and parses them.
 */

export type ChatContentPart =
  | { type: 'text'; text: string }
  | { type: 'image_url'; image_url: { url: string; detail?: string } }
  | { type: 'file'; file: { filename?: string; file_data?: string; file_id?: string } };

export interface ChatToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export type ChatMessage =
  | { role: 'system' | 'developer'; content: string }
  | { role: 'user'; content: string | ChatContentPart[] }
  | { role: 'assistant'; content: string | null; tool_calls?: ChatToolCall[]; refusal?: string | null; reasoning_content?: string }
  | { role: 'tool'; tool_call_id: string; content: string };

export interface ChatTool {
  type: 'function';
  function: { name: string; description?: string; parameters?: unknown; strict?: boolean };
}

export type ChatToolChoice = 'auto' | 'required' | 'none' | { type: 'function'; function: { name: string } };

/** Body of `POST /v1/chat/completions`. */
export interface ChatCompletionRequest {
  model: string;
  messages: ChatMessage[];
  max_completion_tokens?: number;
  max_tokens?: number;
  temperature?: number;
  top_p?: number;
  stop?: string[];
  stream?: boolean;
  stream_options?: { include_usage: boolean };
  tools?: ChatTool[];
  tool_choice?: ChatToolChoice;
  parallel_tool_calls?: boolean;
  user?: string;
  safety_identifier?: string;
  reasoning_effort?: 'low' | 'medium' | 'high';
}

export interface CompletionUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number | null; cache_write_tokens?: number | null } | null;
  completion_tokens_details?: { reasoning_tokens?: number | null } | null;
  /** DeepSeek's cache hits (a part of prompt_tokens), where OpenAI has prompt_tokens_details.cached_tokens. */
  prompt_cache_hit_tokens?: number | null;
  /** Moonshot's cache hits (a part of prompt_tokens), at the top level of usage. */
  cached_tokens?: number | null;
}

export type FinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter' | 'function_call';

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    message: {
      role: 'assistant'; content: string | null; refusal?: string | null; tool_calls?: ChatToolCall[] | null;
      /** Non-standard reasoning text (DeepSeek, vLLM); `reasoning` on OpenRouter and others. */
      reasoning_content?: string | null; reasoning?: string | null;
    };
    finish_reason: FinishReason | null;
    /** vLLM and some compatible servers report the matched stop string here. */
    stop_reason?: string | number | null;
  }>;
  usage?: CompletionUsage | null;
}

export interface ChatToolCallDelta {
  index: number;
  id?: string;
  type?: 'function';
  function?: { name?: string; arguments?: string };
}

export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    delta: {
      role?: 'assistant';
      content?: string | null;
      refusal?: string | null;
      tool_calls?: ChatToolCallDelta[];
      /** Non-standard reasoning text (DeepSeek, vLLM); `reasoning` on OpenRouter. */
      reasoning_content?: string | null;
      reasoning?: string | null;
    };
    finish_reason: FinishReason | null;
    stop_reason?: string | number | null;
    /** Moonshot streams its usage here, in the finishing chunk's choice, instead of the chunk's `usage`. */
    usage?: CompletionUsage | null;
  }>;
  usage?: CompletionUsage | null;
}
