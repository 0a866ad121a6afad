/**
 * OpenAI Chat Completions field limits that Anthropic requests can exceed, and the reversible or stable
 * mappings that keep a translated request within them. Pure (hashing is deterministic).
 *
 * - `user` is at most 64 characters; Claude Code's metadata.user_id is ~150.
 * - function names match ^[a-zA-Z0-9_-]{1,64}$; Anthropic allows longer names and other characters (MCP
 *   tools such as `mcp__server__tool.name`). A name that does not fit is renamed for the request and
 *   renamed back in the answer, so tool_use blocks carry the client's names.
 * - tool call ids are at most 40 characters.
 * - at most 128 tools and 4 stop sequences (refused: dropping them would silently change the answer).
 */
import { createHash } from 'node:crypto';

export const OPENAI_LIMITS = { user: 64, toolName: 64, toolCallId: 40, tools: 128, stop: 4 } as const;

const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const hex = (s: string, n: number) => createHash('sha256').update(s).digest('hex').slice(0, n);

/** metadata.user_id as OpenAI's `user`: unchanged when it fits, else `gwu_` + 32 hex of its sha256 (stable). */
export function openaiUserId(id: string): string {
  return id.length <= OPENAI_LIMITS.user ? id : `gwu_${hex(id, 32)}`;
}

/** A tool call id within 40 characters: unchanged when it fits, else `call_` + 32 hex (stable). */
export function openaiToolCallId(id: string): string {
  return id.length <= OPENAI_LIMITS.toolCallId ? id : `call_${hex(id, 32)}`;
}

/** A valid function name for `name`: itself when valid, else a sanitised prefix + `_` + 8 hex of the name. */
function upstreamToolName(name: string): string {
  if (TOOL_NAME.test(name)) return name;
  return `${name.replace(/[^a-zA-Z0-9_-]/g, '_').slice(0, OPENAI_LIMITS.toolName - 9)}_${hex(name, 8)}`;
}

/** The renames of one request, both ways. Empty when every name is valid (the common case). */
export interface ToolNameMap {
  /** client name → upstream name. */
  toUpstream: Record<string, string>;
  /** upstream name → client name (for tool_use blocks in the answer). */
  toClient: Record<string, string>;
}

/**
 * The renames for a request's tools, and the names of tool_use blocks in its history (a client may
 * replay calls to tools it no longer declares). A renamed name that collides with another name gets the
 * hash of a longer input; names are never merged.
 */
export function toolNameMap(names: Iterable<string>): ToolNameMap {
  // Null-prototype maps: a tool named `constructor` or `toString` must not find Object.prototype's member.
  const map: ToolNameMap = { toUpstream: Object.create(null), toClient: Object.create(null) };
  const all = new Set(names);
  for (const name of all) {
    if (TOOL_NAME.test(name)) continue;
    let up = upstreamToolName(name);
    for (let salt = 1; all.has(up) || map.toClient[up] !== undefined; salt++) up = upstreamToolName(`${name}\u0000${salt}`);
    map.toUpstream[name] = up;
    map.toClient[up] = name;
  }
  return map;
}

/** Every tool name a request mentions: declared tools, tool_choice, and tool_use blocks of its history. */
export function requestToolNames(req: { tools?: Array<{ name: string }>; tool_choice?: { name?: string }; messages: Array<{ content: unknown }> }): string[] {
  const names = (req.tools ?? []).map((t) => t.name);
  if (req.tool_choice?.name) names.push(req.tool_choice.name);
  for (const m of req.messages) {
    if (!Array.isArray(m.content)) continue;
    for (const b of m.content as Array<{ type?: string; name?: unknown }>) if (b?.type === 'tool_use' && typeof b.name === 'string') names.push(b.name);
  }
  return names;
}

/** Anthropic thinking budget → OpenAI reasoning_effort. Disabled (or no thinking) → none. */
export function reasoningEffort(thinking: { type: string; budget_tokens?: number } | undefined): 'low' | 'medium' | 'high' | undefined {
  if (!thinking || thinking.type === 'disabled') return undefined;
  const budget = thinking.budget_tokens;
  if (thinking.type === 'adaptive' || budget === undefined) return 'medium';
  if (budget < 4096) return 'low';
  if (budget < 16384) return 'medium';
  return 'high';
}
