/** Pure protocol layer: Anthropic/OpenAI wire schemas and the translators between them. No I/O. */
export * from './anthropic/schema';
export * from './anthropic/system-turns';
export * from './anthropic/empty-content';
export * from './openai/types';
export * from './translate/common';
export * from './translate/request';
export * from './translate/openai-limits';
export * from './translate/response';
export * from './translate/stream';
export * from './sse';
export * from './tokens';
