/**
 * Anthropic Messages request → OpenAI Chat Completions request (as in OpenAI's Chat Completions API). Pure.
 * What has no equivalent is dropped when harmless (top_k, cache_control) and rejected with a 400 when
 * dropping it would silently change the answer (server tools, >4 stop sequences, >128 tools, file
 * sources). Fields that exceed an OpenAI limit are mapped to fit (see openai-limits.ts).
 */
import { GatewayError } from '@gw/core';
import type { MessagesRequest, MessageParam, ToolChoice, ToolParam } from '../anthropic/schema';
import type { ChatCompletionRequest, ChatContentPart, ChatMessage, ChatTool, ChatToolCall, ChatToolChoice } from '../openai/types';
import { refusePrivateMediaUrls } from './private-url';
import { OPENAI_LIMITS, openaiToolCallId, openaiUserId, reasoningEffort, requestToolNames, toolNameMap } from './openai-limits';

/** Differences between OpenAI-compatible upstreams, set by the provider configuration. */
export interface ToOpenAIOptions {
  /** Model sent upstream; defaults to the request's model. */
  model?: string;
  /** Older compatible servers only know `max_tokens`. Default `max_completion_tokens`. */
  maxTokensField?: 'max_completion_tokens' | 'max_tokens';
  /** Where `metadata.user_id` goes. Default `user`. */
  userField?: 'user' | 'safety_identifier';
  /** Role of the system prompt (`developer` for o-series). Default `system`. */
  systemRole?: 'system' | 'developer';
  /** The upstream takes `reasoning_effort` (thinking is mapped to it). Default false: thinking is dropped. */
  reasoningEffort?: boolean;
  /**
   * Send thinking back as the assistant message's `reasoning_content` (DeepSeek's and Kimi's thinking models need
   * it within a tool loop). Default false: OpenAI itself refuses a message field it does not know.
   */
  reasoningEcho?: boolean;
  /**
   * Pass image URLs that point at private, loopback or link-local addresses on (MEDIA_URL_ALLOW_PRIVATE). Default
   * false: they are refused (see private-url.ts), since the upstream fetches them from inside its own network.
   */
  allowPrivateMediaUrls?: boolean;
  /**
   * Ask a stream for its usage chunk (`stream_options.include_usage`). Default true; false for an upstream known to
   * refuse `stream_options` with a 400 (older Azure OpenAI api-versions, some proxies): billed on estimates then.
   */
  includeUsage?: boolean;
}

/** OpenAI accepts at most this many `stop` strings. */
export const MAX_OPENAI_STOP = OPENAI_LIMITS.stop;
/** Prefix that marks a failed tool result, since OpenAI tool messages have no is_error. */
export const TOOL_ERROR_PREFIX = '[tool error] ';

type Block = { type: string; [k: string]: any };

const unsupported = (code: string, message: string, param: string) => new GatewayError(400, code, message, { param });

/** Translates a validated Anthropic request. Throws GatewayError 400 for what cannot be translated. */
export function toOpenAIRequest(req: MessagesRequest, opts: ToOpenAIOptions = {}): ChatCompletionRequest {
  if (!opts.allowPrivateMediaUrls) refusePrivateMediaUrls(req.messages);
  const out: ChatCompletionRequest = { model: opts.model ?? req.model, messages: [] };
  const names = toolNameMap(requestToolNames(req)).toUpstream;
  const rename = (n: string) => names[n] ?? n;
  const system = systemText(req.system);
  if (system) out.messages.push({ role: opts.systemRole ?? 'system', content: system });
  req.messages.forEach((m, i) => out.messages.push(...translateMessage(m, i, rename, opts.reasoningEcho === true)));

  out[opts.maxTokensField ?? 'max_completion_tokens'] = req.max_tokens;
  if (req.temperature !== undefined) out.temperature = req.temperature;
  if (req.top_p !== undefined) out.top_p = req.top_p;
  if (req.stop_sequences?.length) {
    if (req.stop_sequences.length > MAX_OPENAI_STOP) {
      throw unsupported('too_many_stop_sequences', `This model accepts at most ${MAX_OPENAI_STOP} stop_sequences.`, 'stop_sequences');
    }
    out.stop = [...req.stop_sequences];
  }
  if (req.stream) {
    out.stream = true;
    if (opts.includeUsage !== false) out.stream_options = { include_usage: true }; // without it the usage chunk never comes (B1)
  }
  const userId = req.metadata?.user_id;
  if (typeof userId === 'string' && userId) out[opts.userField ?? 'user'] = openaiUserId(userId);
  if (req.tools?.length) {
    if (req.tools.length > OPENAI_LIMITS.tools) {
      throw unsupported('too_many_tools', `This model accepts at most ${OPENAI_LIMITS.tools} tools.`, 'tools');
    }
    out.tools = req.tools.map((t, i) => translateTool(t, i, rename));
  }
  // OpenAI rejects tool_choice without tools; with no tools there is nothing to choose anyway.
  if (req.tool_choice && out.tools) applyToolChoice(out, req.tool_choice, rename);
  const effort = opts.reasoningEffort ? reasoningEffort(req.thinking) : undefined;
  if (effort) out.reasoning_effort = effort;
  return out;
}

function systemText(system: MessagesRequest['system']): string {
  if (system === undefined) return '';
  if (typeof system === 'string') return system;
  return system.map((b) => b.text).join('\n');
}

function translateTool(tool: ToolParam, i: number, rename: (n: string) => string): ChatTool {
  if (tool.type !== undefined && tool.type !== 'custom') {
    throw unsupported('unsupported_tool', `Tool type "${tool.type}" is not supported by this model's upstream.`, `tools[${i}]`);
  }
  const fn: ChatTool['function'] = { name: rename(tool.name), parameters: tool.input_schema ?? { type: 'object', properties: {} } };
  if (tool.description !== undefined) fn.description = tool.description;
  if (typeof tool.strict === 'boolean') fn.strict = tool.strict;
  return { type: 'function', function: fn };
}

function applyToolChoice(out: ChatCompletionRequest, choice: ToolChoice, rename: (n: string) => string): void {
  const map: Record<string, ChatToolChoice> = { auto: 'auto', any: 'required', none: 'none' };
  out.tool_choice = choice.type === 'tool' ? { type: 'function', function: { name: rename(choice.name ?? '') } } : map[choice.type]!;
  if (choice.disable_parallel_tool_use === true && choice.type !== 'none') out.parallel_tool_calls = false;
}

function translateMessage(m: MessageParam, i: number, rename: (n: string) => string, echo: boolean): ChatMessage[] {
  if (typeof m.content === 'string') return [{ role: m.role, content: m.content }];
  const blocks = m.content as Block[];
  return m.role === 'assistant' ? [assistantMessage(blocks, i, rename, echo)] : userMessages(blocks, i);
}

/**
 * Thinking a translated upstream produced: the gateway gives it `signature: ""`. A signed block is an Anthropic
 * model's (its signature only means something to Anthropic) and `redacted_thinking` is encrypted: neither is
 * another model's reasoning to continue from.
 */
const echoable = (b: Block) => b.type === 'thinking' && typeof b.thinking === 'string' && !b.signature;

function assistantMessage(blocks: Block[], i: number, rename: (n: string) => string, echo: boolean): ChatMessage {
  const texts: string[] = [];
  const calls: ChatToolCall[] = [];
  const reasoning: string[] = [];
  blocks.forEach((b, j) => {
    if (b.type === 'text') texts.push(b.text);
    else if (b.type === 'tool_use') {
      calls.push({ id: openaiToolCallId(b.id), type: 'function', function: { name: rename(b.name), arguments: JSON.stringify(b.input ?? {}) } });
    } else if (echoable(b)) reasoning.push(b.thinking);
    else if (b.type !== 'thinking' && b.type !== 'redacted_thinking') {
      throw unsupported('unsupported_content', `Content block "${b.type}" is not supported by this model's upstream.`, `messages[${i}].content[${j}]`);
    }
  });
  const msg: ChatMessage = { role: 'assistant', content: texts.length ? texts.join('') : calls.length ? null : '' };
  if (calls.length) msg.tool_calls = calls;
  // DeepSeek refuses tool calls without their reasoning (400); calls with none to echo (thinking off, or an
  // Anthropic channel's turn) get an empty one.
  if (echo && (reasoning.length || calls.length)) msg.reasoning_content = reasoning.join('\n');
  return msg;
}

/** Tool results first (they must follow the assistant's tool calls), then the rest of the turn. */
function userMessages(blocks: Block[], i: number): ChatMessage[] {
  const tools: ChatMessage[] = [];
  const parts: ChatContentPart[] = [];
  const moved: ChatContentPart[] = []; // images out of tool results: a tool message takes text only
  blocks.forEach((b, j) => {
    const param = `messages[${i}].content[${j}]`;
    if (b.type === 'tool_result') {
      const texts: string[] = [];
      if (typeof b.content === 'string') texts.push(b.content);
      else if (Array.isArray(b.content)) {
        b.content.forEach((c: Block, k: number) => {
          if (c.type === 'text') texts.push(c.text);
          else moved.push(...contentPart(c, `${param}.content[${k}]`));
        });
      }
      const text = texts.join('\n');
      tools.push({ role: 'tool', tool_call_id: openaiToolCallId(b.tool_use_id), content: b.is_error ? TOOL_ERROR_PREFIX + text : text });
    } else if (b.type !== 'thinking' && b.type !== 'redacted_thinking') {
      parts.push(...contentPart(b, param));
    }
  });
  const rest = [...moved, ...parts];
  if (!rest.length) return tools.length ? tools : [{ role: 'user', content: '' }];
  const single = rest.length === 1 && rest[0]!.type === 'text' ? rest[0]!.text : null;
  return [...tools, { role: 'user', content: single ?? rest }];
}

function contentPart(b: Block, param: string): ChatContentPart[] {
  switch (b.type) {
    case 'text': return [{ type: 'text', text: b.text }];
    case 'image': return [{ type: 'image_url', image_url: { url: sourceUrl(b.source, param) } }];
    case 'document': return documentParts(b, param);
    default:
      throw unsupported('unsupported_content', `Content block "${b.type}" is not supported by this model's upstream.`, param);
  }
}

/** Anthropic's image types: any other media_type is refused there, and here it would reach the upstream's decoder. */
const IMAGE_TYPES = ['image/jpeg', 'image/png', 'image/gif', 'image/webp'];
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const HTTP_URL = /^https?:\/\//i;

/** 400 in the validator's words (`messages.0.content.0.source.url: …`), `param` as given. */
const invalid = (param: string, message: string) =>
  new GatewayError(400, 'invalid_value', `${param.replace(/\[(\d+)\]/g, '.$1')}: ${message}`, { param });

/**
 * A base64 source's data URL. The upstream decodes it: a media_type that is not `types` (or one holding `;base64,`
 * and data of its own) or data that is not base64 is refused as Anthropic refuses it, since the gateway measured the
 * block as what it claims to be (an image is reserved as one image, whatever a PDF behind it holds).
 */
function dataUrl(source: Block, types: readonly string[], param: string): string {
  if (typeof source.media_type !== 'string' || !types.includes(source.media_type)) {
    throw invalid(`${param}.source.media_type`, `Input should be ${types.map((t) => `'${t}'`).join(' or ')}`);
  }
  if (typeof source.data !== 'string' || !BASE64.test(source.data)) throw invalid(`${param}.source.data`, 'Input should be a valid base64 string');
  return `data:${source.media_type};base64,${source.data}`;
}

function sourceUrl(source: Block, param: string): string {
  if (source?.type === 'base64') return dataUrl(source, IMAGE_TYPES, param);
  // The upstream fetches it: only a web URL, as Anthropic takes (a self-hosted server may read `file:` paths).
  if (source?.type === 'url') {
    if (typeof source.url !== 'string' || !HTTP_URL.test(source.url)) throw invalid(`${param}.source.url`, 'Input should be an http or https URL');
    return source.url;
  }
  throw unsupported('unsupported_content', `Source type "${source?.type}" is not supported by this model's upstream.`, `${param}.source`);
}

/**
 * A document's `title` and `context` as text the model reads before it: a chat message has no field for them, and
 * dropped, the model never saw what the client said the document is. Empty or not a string: left out.
 */
function documentHeader(b: Block): string {
  const lines: string[] = [];
  if (typeof b.title === 'string' && b.title) lines.push(`Document title: ${b.title}`);
  if (typeof b.context === 'string' && b.context) lines.push(`Document context: ${b.context}`);
  return lines.join('\n');
}

function documentParts(b: Block, param: string): ChatContentPart[] {
  const s = b.source ?? {};
  const header = documentHeader(b);
  // Text documents keep one text part, the header on top; other documents get it as a part of its own before them.
  const text = (t: string): ChatContentPart[] => [{ type: 'text', text: header ? `${header}\n\n${t}` : t }];
  const headed = (parts: ChatContentPart[]): ChatContentPart[] => (header ? [{ type: 'text', text: header }, ...parts] : parts);
  if (s.type === 'text') return text(String(s.data ?? ''));
  if (s.type === 'content') {
    if (typeof s.content === 'string') return text(s.content);
    return headed((s.content as Block[]).flatMap((c, k) => contentPart(c, `${param}.source.content[${k}]`)));
  }
  if (s.type === 'base64') {
    return headed([{ type: 'file', file: { filename: b.title || 'document.pdf', file_data: dataUrl(s, ['application/pdf'], param) } }]);
  }
  throw unsupported('unsupported_content', `Document source "${s.type}" is not supported by this model's upstream.`, `${param}.source`);
}
