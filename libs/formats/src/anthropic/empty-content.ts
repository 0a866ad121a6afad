/**
 * Empty content Anthropic's API refuses (400 invalid_request_error), in its words. Translated channels would send it
 * on (OpenAI-compatible servers answer an empty user turn, and the request was billed) and native ones have it refused
 * upstream: refused here, before any hold or upstream call, every channel type answers alike.
 */
import type { MessageParam } from './schema';

export interface EmptyContentIssue {
  /** Anthropic's message, `<path>: <text>`. */
  message: string;
  /** The field, in the API's `messages[0].content` form. */
  param: string;
}

const TEXT_EMPTY = 'messages: text content blocks must be non-empty';
const TEXT_BLANK = 'messages: text content blocks must contain non-whitespace text';
const PREFILL_TRAILING = 'messages: final assistant content cannot end with trailing whitespace';

/** True for text that is only whitespace (`""` too; callers check `""` first for its own message). */
const blank = (text: string): boolean => text.trim() === '';

type Block = { type: string; text?: unknown; content?: unknown };

/**
 * The first empty or blank text block of one block list (a turn's content, or a tool_result's), or null. `""` is
 * always refused; a whitespace-only block only when no text block of the same list has real text: Anthropic accepts
 * `[" ", "Hi"]` but refuses `[" "]` and `[" ", tool_use]`.
 */
function blockListIssue(blocks: readonly Block[], at: string): EmptyContentIssue | null {
  const texts = blocks.map((b, j) => [b, j] as const).filter(([b]) => b.type === 'text' && typeof b.text === 'string');
  for (const [b, j] of texts) if (b.text === '') return { message: TEXT_EMPTY, param: `${at}[${j}].text` };
  const firstBlank = texts.find(([b]) => blank(b.text as string));
  if (firstBlank && texts.every(([b]) => blank(b.text as string))) return { message: TEXT_BLANK, param: `${at}[${firstBlank[1]}].text` };
  for (let j = 0; j < blocks.length; j++) {
    const b = blocks[j]!;
    // A tool_result may be empty (`""`, `[]` or no content), but text inside it follows the rule above, whichever
    // form it takes: a string is one text block (`"  "` is `[{"type":"text","text":"  "}]`, refused alike).
    if (b.type === 'tool_result' && Array.isArray(b.content)) {
      const inner = blockListIssue(b.content as Block[], `${at}[${j}].content`);
      if (inner) return inner;
    }
    if (b.type === 'tool_result' && typeof b.content === 'string' && b.content !== '' && blank(b.content)) {
      return { message: TEXT_BLANK, param: `${at}[${j}].content` };
    }
  }
  return null;
}

/**
 * The first empty content of a schema-valid conversation, or null: a turn with `""` or `[]` content (but the final
 * assistant turn, a prefill, which may be empty), a text block with `""` text (in any turn or tool_result), a turn
 * (or tool_result, as a string or a block list) whose text is all whitespace, or a final assistant prefill ending in
 * whitespace.
 */
export function emptyContentIssue(messages: readonly MessageParam[]): EmptyContentIssue | null {
  for (let i = 0; i < messages.length; i++) {
    const { role, content } = messages[i]!;
    const finalAssistant = i === messages.length - 1 && role === 'assistant';
    if (content.length === 0 && !finalAssistant) {
      return { message: `messages.${i}: all messages must have non-empty content except for the optional final assistant message`, param: `messages[${i}].content` };
    }
    if (typeof content === 'string') {
      if (content !== '' && blank(content)) return { message: TEXT_BLANK, param: `messages[${i}].content` };
    } else {
      const issue = blockListIssue(content as readonly Block[], `messages[${i}].content`);
      if (issue) return issue;
    }
    if (finalAssistant) {
      const issue = trailingWhitespace(content as string | readonly Block[], i);
      if (issue) return issue;
    }
  }
  return null;
}

/** A prefill ending in whitespace (the string, or a final text block), which Anthropic refuses. */
function trailingWhitespace(content: string | readonly Block[], i: number): EmptyContentIssue | null {
  if (typeof content === 'string') return /\s$/.test(content) ? { message: PREFILL_TRAILING, param: `messages[${i}].content` } : null;
  const j = content.length - 1;
  const last = content[j];
  if (last?.type === 'text' && typeof last.text === 'string' && /\s$/.test(last.text)) return { message: PREFILL_TRAILING, param: `messages[${i}].content[${j}].text` };
  return null;
}
