/**
 * Anthropic runs server tools (web search, web fetch, code execution, tool search, MCP) in a loop inside one
 * request: after each call the model samples again, over the whole conversation plus the call's result, and the
 * answer's `usage.input_tokens` counts the input of every sampling. Such a request's reported input can therefore
 * exceed the context window, by up to one window per sampling; clamping it to one window billed a large
 * conversation with several searches a fraction of what the upstream charged for it.
 */
import type { MessagesRequest } from '@gw/formats';
import { codeExecutionToolAt } from './code-execution';
import { serverToolMatcher, webSearchBound } from './web-search';

/** Server tools without a per-request bound of their own (web fetch, tool search, MCP toolsets). */
const isOtherServerTool = serverToolMatcher(/^\s*(web_fetch|tool_search|mcp)/i);

/**
 * The most samplings `body` can make upstream: 1, plus one per server-tool call it may make (Σ of its web-search
 * tools' max_uses, `codeExecutionMaxCalls` with a code-execution tool, and `webSearchCap` more when it has any other
 * server tool or `mcp_servers`, whose calls nothing else bounds). Its input may be billed up to this many windows.
 */
export function samplingsBound(body: Pick<MessagesRequest, 'tools'> & { mcp_servers?: unknown }, webSearchCap: number, codeExecutionMaxCalls: number): number {
  const tools = Array.isArray(body.tools) ? body.tools : [];
  const mcp = Array.isArray(body.mcp_servers) && body.mcp_servers.length > 0;
  return 1 + webSearchBound(body, webSearchCap)
    + (codeExecutionToolAt(body) >= 0 ? codeExecutionMaxCalls : 0)
    + (mcp || tools.some(isOtherServerTool) ? webSearchCap : 0);
}
