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

/**
 * The first empty content of a schema-valid conversation, or null: a turn with `""` or `[]` content (but the final
 * assistant turn, a prefill, which may be empty), else a text block with `""` text (in any turn).
 */
export function emptyContentIssue(messages: readonly MessageParam[]): EmptyContentIssue | null {
  for (let i = 0; i < messages.length; i++) {
    const { role, content } = messages[i]!;
    const finalAssistant = i === messages.length - 1 && role === 'assistant';
    if (content.length === 0 && !finalAssistant) {
      return { message: `messages.${i}: all messages must have non-empty content except for the optional final assistant message`, param: `messages[${i}].content` };
    }
    if (typeof content === 'string') continue;
    for (let j = 0; j < content.length; j++) {
      const b = content[j]!;
      if (b.type === 'text' && (b as { text: string }).text === '') {
        return { message: 'messages: text content blocks must be non-empty', param: `messages[${i}].content[${j}].text` };
      }
    }
  }
  return null;
}
