/** Upstream adapters behind one interface; see adapter.ts. */
export * from './adapter';
export * from './context';
export * from './errors';
export * from './reasoning-echo';
export * from './registry';
export * from './scrubber';
export * from './stream-start';
export * from './url';
export { anthropicAdapter, ANTHROPIC_VERSION } from './anthropic/adapter';
export { createOpenAICompatibleAdapter, openaiAdapter, openaiLegacyAdapter, type OpenAICompatibleConfig } from './openai/adapter';
export { CODE_EXECUTION_CALL_NAMES, countCodeExecutionCalls, isCodeExecutionCall } from './anthropic/code-execution';
