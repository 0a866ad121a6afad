/**
 * TypeBox schemas of the Anthropic Messages request (Anthropic's wire format). They validate what the
 * gateway must understand and keep everything else: every object allows unknown fields, because a proxy
 * forwards fields it does not know. Field descriptions feed the OpenAPI document.
 */
import { Type, type Static } from '@sinclair/typebox';

const open = { additionalProperties: true } as const;

/** `cache_control` on blocks and tools; `ttl` is "5m" or "1h" today. */
export const CacheControlSchema = Type.Object(
  { type: Type.String({ description: 'Cache breakpoint kind, e.g. "ephemeral".' }), ttl: Type.Optional(Type.String()) },
  { ...open, description: 'Prompt-cache breakpoint.' },
);

const cacheControl = Type.Optional(CacheControlSchema);

export const TextBlockSchema = Type.Object(
  { type: Type.Literal('text'), text: Type.String({ description: 'The text.' }), cache_control: cacheControl },
  { ...open, description: 'A text block.' },
);

const SourceSchema = Type.Object(
  { type: Type.String({ description: 'Source kind: base64, url, file, text or content.' }) },
  { ...open, description: 'Where the image or document comes from.' },
);

export const ImageBlockSchema = Type.Object(
  { type: Type.Literal('image'), source: SourceSchema, cache_control: cacheControl },
  { ...open, description: 'An image (base64 with media_type, url or file).' },
);

export const DocumentBlockSchema = Type.Object(
  { type: Type.Literal('document'), source: SourceSchema, title: Type.Optional(Type.String()), cache_control: cacheControl },
  { ...open, description: 'A document (PDF, plain text, content blocks, url or file).' },
);

export const ToolUseBlockSchema = Type.Object(
  {
    type: Type.Literal('tool_use'),
    id: Type.String({ description: 'Tool call id (toolu_...).' }),
    name: Type.String({ description: 'Tool name.' }),
    input: Type.Unknown({ description: 'Tool input object.' }),
    cache_control: cacheControl,
  },
  { ...open, description: 'A tool call made by the assistant.' },
);

export const ToolResultBlockSchema = Type.Object(
  {
    type: Type.Literal('tool_result'),
    tool_use_id: Type.String({ description: 'Id of the tool_use block this answers.' }),
    content: Type.Optional(Type.Union([Type.String(), Type.Array(Type.Object({ type: Type.String() }, open))], { description: 'Result as text or blocks.' })),
    is_error: Type.Optional(Type.Boolean({ description: 'True when the tool failed.' })),
    cache_control: cacheControl,
  },
  { ...open, description: 'The result of a tool call, sent by the user.' },
);

export const ThinkingBlockSchema = Type.Object(
  { type: Type.Literal('thinking'), thinking: Type.String(), signature: Type.Optional(Type.String()) },
  { ...open, description: 'Extended thinking; must be sent back unchanged.' },
);

export const RedactedThinkingBlockSchema = Type.Object(
  { type: Type.Literal('redacted_thinking'), data: Type.String() },
  { ...open, description: 'Encrypted thinking; must be sent back unchanged.' },
);

const KNOWN_BLOCKS = ['text', 'image', 'document', 'tool_use', 'tool_result', 'thinking', 'redacted_thinking'];

/** Any other block kind (search_result, server_tool_use, container_upload, ...) passes unchecked. */
export const OtherBlockSchema = Type.Object(
  { type: Type.String({ pattern: `^(?!(?:${KNOWN_BLOCKS.join('|')})$).+$`, description: 'Block kind.' }) },
  { ...open, description: 'A content block kind the gateway forwards without checking.' },
);

export const ContentBlockSchema = Type.Union([
  TextBlockSchema, ImageBlockSchema, DocumentBlockSchema, ToolUseBlockSchema, ToolResultBlockSchema,
  ThinkingBlockSchema, RedactedThinkingBlockSchema, OtherBlockSchema,
], { description: 'A content block.' });

export const MessageParamSchema = Type.Object(
  {
    role: Type.Union([Type.Literal('user'), Type.Literal('assistant')], { description: 'user or assistant.' }),
    content: Type.Union([Type.String(), Type.Array(ContentBlockSchema)], { description: 'A string or an array of content blocks.' }),
  },
  { ...open, description: 'One conversation turn.' },
);

/** A custom tool has `input_schema`; a server tool has a dated `type` such as `web_search_20250305`. */
export const ToolSchema = Type.Object(
  {
    name: Type.String({ description: 'Tool name.' }),
    type: Type.Optional(Type.String({ description: '"custom" (default) or a dated server-tool type.' })),
    description: Type.Optional(Type.String({ description: 'What the tool does.' })),
    input_schema: Type.Optional(Type.Object({}, { ...open, description: 'JSON Schema of the tool input.' })),
    strict: Type.Optional(Type.Boolean({ description: 'Enforce the input schema strictly.' })),
    cache_control: cacheControl,
  },
  { ...open, description: 'A tool the model may call.' },
);

export const ToolChoiceSchema = Type.Object(
  {
    type: Type.Union([Type.Literal('auto'), Type.Literal('any'), Type.Literal('tool'), Type.Literal('none')], { description: 'auto, any, tool or none.' }),
    name: Type.Optional(Type.String({ description: 'The tool to call when type is "tool".' })),
    disable_parallel_tool_use: Type.Optional(Type.Boolean({ description: 'At most / exactly one tool call.' })),
  },
  { ...open, description: 'How the model may use tools.' },
);

export const ThinkingConfigSchema = Type.Object(
  {
    type: Type.String({ description: 'enabled, disabled or adaptive.' }),
    budget_tokens: Type.Optional(Type.Integer({ minimum: 0, description: 'Thinking budget when enabled.' })),
  },
  { ...open, description: 'Extended thinking configuration.' },
);

export const MetadataSchema = Type.Object(
  { user_id: Type.Optional(Type.Union([Type.String(), Type.Null()], { description: 'Opaque end-user id.' })) },
  { ...open, description: 'Request metadata.' },
);

const commonFields = {
  model: Type.String({ minLength: 1, description: 'Model name as the gateway lists it.' }),
  messages: Type.Array(MessageParamSchema, { minItems: 1, description: 'The conversation, oldest first.' }),
  system: Type.Optional(Type.Union([Type.String(), Type.Array(TextBlockSchema)], { description: 'System prompt: a string or text blocks.' })),
  tools: Type.Optional(Type.Array(ToolSchema, { description: 'Tools the model may call.' })),
  tool_choice: Type.Optional(ToolChoiceSchema),
  thinking: Type.Optional(ThinkingConfigSchema),
};

/** Body of `POST /v1/messages`. */
export const MessagesRequestSchema = Type.Object(
  {
    ...commonFields,
    // Type.Integer is strict: "5" fails, unlike Elysia's t.Integer, which coerces numeric strings.
    max_tokens: Type.Integer({ minimum: 1, description: 'Maximum output tokens (integer >= 1).' }),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 1, description: 'Sampling temperature, 0..1.' })),
    top_p: Type.Optional(Type.Number({ minimum: 0, maximum: 1, description: 'Nucleus sampling, 0..1.' })),
    top_k: Type.Optional(Type.Integer({ minimum: 0, description: 'Top-k sampling (integer >= 0).' })),
    stream: Type.Optional(Type.Boolean({ description: 'Answer as server-sent events.' })),
    stop_sequences: Type.Optional(Type.Array(Type.String(), { description: 'Custom strings that stop generation.' })),
    metadata: Type.Optional(MetadataSchema),
  },
  { ...open, description: 'Anthropic Messages request.' },
);
export type MessagesRequest = Static<typeof MessagesRequestSchema>;

/** Body of `POST /v1/messages/count_tokens` (no max_tokens). */
export const CountTokensRequestSchema = Type.Object(commonFields, { ...open, description: 'Token count request.' });
export type CountTokensRequest = Static<typeof CountTokensRequestSchema>;

export type ContentBlockParam = Static<typeof ContentBlockSchema>;
export type MessageParam = Static<typeof MessageParamSchema>;
export type ToolParam = Static<typeof ToolSchema>;
export type ToolChoice = Static<typeof ToolChoiceSchema>;

export * from './response';
