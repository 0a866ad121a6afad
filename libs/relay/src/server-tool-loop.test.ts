import { describe, expect, test } from 'bun:test';
import { samplingsBound } from './server-tool-loop';

const bound = (body: Record<string, unknown>) => samplingsBound(body as never, 10, 20);

describe('samplingsBound', () => {
  test('no server tool: one sampling', () => {
    expect(bound({})).toBe(1);
    expect(bound({ tools: [{ name: 'lookup', input_schema: { type: 'object' } }] })).toBe(1);
    expect(bound({ mcp_servers: [] })).toBe(1);
  });
  test('one more per call each server tool may make', () => {
    expect(bound({ tools: [{ type: 'web_search_20250305', name: 'web_search', max_uses: 3 }] })).toBe(4);
    expect(bound({ tools: [{ type: 'web_search_20250305', name: 'web_search' }] })).toBe(11);
    expect(bound({ tools: [{ type: 'code_execution_20250825', name: 'code_execution' }] })).toBe(21);
    // Tools nothing else bounds: the web-search cap, once.
    expect(bound({ tools: [{ type: 'web_fetch_20250910', name: 'web_fetch' }, { type: ' Tool_Search_tool_regex', name: 't' }] })).toBe(11);
    expect(bound({ mcp_servers: [{ type: 'url', url: 'https://example.com', name: 'x' }] })).toBe(11);
    expect(bound({ tools: [{ type: 'web_search_20250305', name: 'web_search', max_uses: 2 }, { type: 'code_execution_20250825', name: 'code_execution' }, { type: 'mcp_toolset', mcp_server_name: 'x' }] })).toBe(1 + 2 + 20 + 10);
  });
});
