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

/**
 * An UPPER BOUND of the input tokens of a request, for reservations (the estimate above is for display).
 * Text counts half a token per UTF-8 byte, 2 characters per token of ASCII (tokenizers average 3–4 on prose, fewer
 * on code and digits), more for other scripts (boundTextTokens); wide characters count one each. `unmeasured` is true when some input cannot be
 * bounded without fetching or parsing it: a URL or file source, a base64 PDF, an image over
 * IMAGE_MAX_BASE64_CHARS, a server tool that brings in content (web search/fetch, code execution), MCP
 * servers. Such a request must reserve the model's whole context window.
 */
export interface InputMeasure {
  /** The ±25% estimate (count_tokens, the usage shown for translated streams). */
  estimate: number;
  /** A generous bound of what the measurable part can cost. */
  bound: number;
  unmeasured: boolean;
}

/** Tokens one base64 image can cost: 3× Anthropic's ~1,600 ceiling, which also covers OpenAI's tile and patch counts. */
export const IMAGE_MAX_TOKENS = 4800;
/** Base64 images up to ~5 MB (Anthropic's per-image limit) are bounded by IMAGE_MAX_TOKENS; larger ones are unmeasured. */
export const IMAGE_MAX_BASE64_CHARS = 7_000_000;
/** Hidden tool-use system prompt an upstream adds when tools are present (Anthropic's is ~350 tokens). */
const TOOLS_OVERHEAD = 1024;
const SERVER_TOOL = /^(web_search|web_fetch|code_execution|tool_search|mcp)/;

/**
 * Generous bound of a text's tokens: 1 per wide character, and half a token per UTF-8 byte of the rest. ASCII is 2
 * characters per token as before; Cyrillic, Greek, Arabic or Hebrew 1 per character, Thai, Devanagari and the other
 * 3-byte scripts 1.5, emoji and everything beyond the BMP 2. Counted in characters (UTF-16 units), those took half
 * a token or one each where byte-level tokenizers take one to three: a hold too small, so a client whose prompts were
 * in such scripts, sending many at once at the end of its balance, was served far past it (charges are capped at the
 * hold plus what is left).
 */
export function boundTextTokens(text: string): number {
  if (!text) return 0;
  return boundOf(text, text.match(WIDE)?.length ?? 0);
}

/** Wide characters are 3 UTF-8 bytes each, counted 1 token instead; Buffer.byteLength is native (about 1 µs per 90 KB). */
const boundOf = (text: string, wide: number) => wide + Math.ceil((Buffer.byteLength(text, 'utf8') - 3 * wide) / 2);

interface Tally { estimate: number; bound: number; unmeasured: boolean }

function addText(t: Tally, text: string): void {
  if (!text) return;
  // One scan for wide characters serves both figures (this runs on every request's whole prompt).
  const wide = text.match(WIDE)?.length ?? 0;
  t.estimate += wide + Math.ceil((text.length - wide) / 4);
  t.bound += boundOf(text, wide);
}

const str = (v: unknown): string => (typeof v === 'string' ? v : '');

function addMedia(t: Tally, b: Block): void {
  // A document's title and context reach the model (as text on OpenAI upstreams): unmeasured, a client could put a
  // whole book there and be reserved for one word.
  if (b.type === 'document') {
    addText(t, str(b.title));
    addText(t, str(b.context));
  }
  const src = b.source;
  const kind = src?.type;
  if (kind === 'text') return addText(t, String(src.data ?? ''));
  if (kind === 'content') {
    if (typeof src.content === 'string') addText(t, src.content);
    else if (Array.isArray(src.content)) for (const c of src.content) addBlock(t, c);
    return;
  }
  t.estimate += IMAGE_TOKENS;
  if (b.type === 'image' && kind === 'base64' && str(src.data).length <= IMAGE_MAX_BASE64_CHARS) t.bound += IMAGE_MAX_TOKENS;
  else t.unmeasured = true; // url, file, base64 PDF (pages unknown), or a larger image
}

function addBlock(t: Tally, b: Block): void {
  if (!b || typeof b !== 'object') return;
  switch (b.type) {
    case 'text': return addText(t, str(b.text));
    case 'image':
    case 'document': return addMedia(t, b);
    case 'tool_use': addText(t, str(b.name)); return addText(t, JSON.stringify(b.input ?? {}));
    case 'tool_result':
      if (typeof b.content === 'string') return addText(t, b.content);
      if (Array.isArray(b.content)) for (const c of b.content) addBlock(t, c);
      return;
    case 'thinking': return addText(t, str(b.thinking));
    case 'redacted_thinking': {
      const n = str(b.data).length;
      t.estimate += Math.ceil(n / 8);
      t.bound += Math.ceil(n / 2);
      return;
    }
    case 'container_upload': t.unmeasured = true; return; // a file id
    default: return addText(t, JSON.stringify(b));
  }
}

/** Estimate and bound of the input of a Messages / count_tokens request, in one pass. */
export function measureRequestTokens(req: Pick<CountTokensRequest, 'system' | 'messages' | 'tools'> & { mcp_servers?: unknown }): InputMeasure {
  const t: Tally = { estimate: PER_REQUEST, bound: PER_REQUEST, unmeasured: false };
  if (typeof req.system === 'string') addText(t, req.system);
  else if (req.system) for (const b of req.system) addText(t, str(b.text));
  for (const m of req.messages) {
    t.estimate += PER_MESSAGE;
    t.bound += PER_MESSAGE * 2;
    if (typeof m.content === 'string') addText(t, m.content);
    else for (const b of m.content as Block[]) addBlock(t, b);
  }
  const tools = req.tools ?? [];
  if (tools.length) t.bound += TOOLS_OVERHEAD;
  for (const tool of tools) {
    t.estimate += PER_TOOL;
    t.bound += PER_TOOL * 2;
    for (const part of [tool.name, tool.description ?? '', JSON.stringify(tool.input_schema ?? {})]) addText(t, part);
    if (typeof tool.type === 'string' && SERVER_TOOL.test(tool.type)) t.unmeasured = true;
  }
  if (Array.isArray(req.mcp_servers) && req.mcp_servers.length) t.unmeasured = true;
  return { estimate: t.estimate, bound: t.bound, unmeasured: t.unmeasured };
}

/** Estimated input tokens of a Messages / count_tokens request (system, messages, tools). */
export function estimateRequestTokens(req: Pick<CountTokensRequest, 'system' | 'messages' | 'tools'>): number {
  return measureRequestTokens(req).estimate;
}
