/**
 * Code-execution calls in an Anthropic answer: each `server_tool_use` content block with one of these names is
 * one call (its result follows in a `*_tool_result` block). The usage object has no count for them, so the
 * gateway counts the blocks itself: in JSON answers from the content, in streams at each content_block_start.
 */
export const CODE_EXECUTION_CALL_NAMES: ReadonlySet<string> = new Set(['code_execution', 'bash_code_execution', 'text_editor_code_execution']);

/** Whether a content block is a code-execution call. */
export function isCodeExecutionCall(block: unknown): boolean {
  if (!block || typeof block !== 'object') return false;
  const b = block as { type?: unknown; name?: unknown };
  return b.type === 'server_tool_use' && typeof b.name === 'string' && CODE_EXECUTION_CALL_NAMES.has(b.name);
}

/** The code-execution calls in a message's content (0 when it is not an array). */
export function countCodeExecutionCalls(content: unknown): number {
  if (!Array.isArray(content)) return 0;
  let n = 0;
  for (const b of content) if (isCodeExecutionCall(b)) n++;
  return n;
}
