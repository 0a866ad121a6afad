/**
 * `role: "system"` turns inside `messages`, folded into the top-level `system` prompt.
 *
 * Claude Code (and other clients) put a system turn into `messages` when they do not recognise the model
 * name (a gateway alias, a non-Claude model). Anthropic refuses it and the client then resends without it;
 * the gateway accepts it instead, so the first request already succeeds on every channel type: the turns
 * are appended, in order, after the existing system prompt, as text blocks (their cache_control kept).
 * Pure; runs before schema validation, so what it cannot fold is left for the validator to report.
 */

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => v !== null && typeof v === 'object' && !Array.isArray(v);
const isTextBlock = (b: unknown): b is Json & { text: string } => isObject(b) && b.type === 'text' && typeof b.text === 'string';

/** The text blocks of a system turn's content, or null when it is not text (then it is not folded). */
function turnBlocks(content: unknown): Json[] | null {
  // Empty texts are dropped: Anthropic refuses empty system text blocks.
  if (typeof content === 'string') return content ? [{ type: 'text', text: content }] : [];
  if (Array.isArray(content) && content.every(isTextBlock)) return content.filter((b) => b.text !== '');
  return null;
}

/** The current `system` as text blocks, or null when it has a shape the validator must report. */
function systemBlocks(system: unknown): Json[] | null {
  if (system === undefined) return [];
  if (typeof system === 'string') return system ? [{ type: 'text', text: system }] : [];
  if (Array.isArray(system)) return system as Json[];
  return null;
}

/**
 * Returns `body` with its foldable system turns moved into `system`, or `body` itself (same object) when
 * it has none. Never mutates its argument.
 */
export function foldSystemTurns<T>(body: T): T {
  if (!isObject(body) || !Array.isArray(body.messages)) return body;
  const messages = body.messages as unknown[];
  if (!messages.some((m) => isObject(m) && m.role === 'system')) return body;
  const system = systemBlocks(body.system);
  if (system === null) return body;
  const kept: unknown[] = [];
  const folded: Json[] = [];
  for (const m of messages) {
    const blocks = isObject(m) && m.role === 'system' ? turnBlocks(m.content) : null;
    if (blocks) folded.push(...blocks);
    else kept.push(m);
  }
  if (!folded.length && kept.length === messages.length) return body;
  return { ...body, system: [...system, ...folded], messages: kept } as T;
}
