/**
 * A cheap local token ESTIMATE, used by count_tokens when the upstream cannot count and to fill usage an
 * upstream failed to report. It is not any model's tokenizer: roughly 4 characters per token for Latin
 * text, one token per CJK/kana/hangul character, a flat cost per image and document. Expect ±25%.
 */
import type { CountTokensRequest } from './anthropic/schema';

/** Flat cost of one image: Anthropic's (w·h)/750 for a ~1092×1092 image, the size it scales down to. */
export const IMAGE_TOKENS = 1600;
/** Fixed overhead per message (role markers), per tool, and per request. */
const PER_MESSAGE = 4;
const PER_TOOL = 16;
const PER_REQUEST = 8;

// CJK ideographs, kana, hangul: about one token each.
const WIDE = /[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]/g;

/** Estimated tokens of a piece of text. */
export function estimateTextTokens(text: string): number {
  if (!text) return 0;
  const wide = text.match(WIDE)?.length ?? 0;
  return wide + Math.ceil((text.length - wide) / 4);
}

type Block = { type: string; [k: string]: any };

function blockTokens(b: Block): number {
  switch (b.type) {
    case 'text': return estimateTextTokens(b.text ?? '');
    case 'image': return IMAGE_TOKENS;
    case 'document':
      return b.source?.type === 'text' ? estimateTextTokens(String(b.source.data ?? '')) : IMAGE_TOKENS;
    case 'tool_use': return estimateTextTokens(b.name ?? '') + estimateTextTokens(JSON.stringify(b.input ?? {}));
    case 'tool_result':
      if (typeof b.content === 'string') return estimateTextTokens(b.content);
      return Array.isArray(b.content) ? b.content.reduce((n: number, c: Block) => n + blockTokens(c), 0) : 0;
    case 'thinking': return estimateTextTokens(b.thinking ?? '');
    case 'redacted_thinking': return Math.ceil(String(b.data ?? '').length / 8);
    default: return estimateTextTokens(JSON.stringify(b));
  }
}

/** Estimated input tokens of a Messages / count_tokens request (system, messages, tools). */
export function estimateRequestTokens(req: Pick<CountTokensRequest, 'system' | 'messages' | 'tools'>): number {
  let n = PER_REQUEST;
  if (typeof req.system === 'string') n += estimateTextTokens(req.system);
  else if (req.system) n += req.system.reduce((s, b) => s + estimateTextTokens(b.text), 0);
  for (const m of req.messages) {
    n += PER_MESSAGE;
    n += typeof m.content === 'string' ? estimateTextTokens(m.content) : (m.content as Block[]).reduce((s, b) => s + blockTokens(b), 0);
  }
  for (const t of req.tools ?? []) {
    n += PER_TOOL + estimateTextTokens(t.name) + estimateTextTokens(t.description ?? '') + estimateTextTokens(JSON.stringify(t.input_schema ?? {}));
  }
  return n;
}
