import { expect, test } from 'bun:test';
import { countCodeExecutionCalls } from '@gw/providers';
import { codeExecutionToolAt, isCodeExecutionTool, requireCodeExecutionPrice } from './code-execution';

const CE = { type: 'code_execution_20250825', name: 'code_execution' };

test('the tool is matched in any version, case and leading spacing; nothing else is', () => {
  for (const type of ['code_execution_20250825', 'code_execution_20250522', 'Code_Execution_20250825', '  code_execution_x', 'CODE_EXECUTION']) {
    expect(isCodeExecutionTool({ type, name: 'code_execution' })).toBe(true);
  }
  for (const t of [{ type: 'web_search_20250305' }, { name: 'code_execution', input_schema: {} }, { type: 'bash_20250124' }, null, 'code_execution', { type: 5 }]) {
    expect(isCodeExecutionTool(t)).toBe(false);
  }
  expect(codeExecutionToolAt({ tools: [{ name: 'x', input_schema: {} } as any, CE] })).toBe(1);
  expect(codeExecutionToolAt({})).toBe(-1);
});

test('unpriced: 403 tool_not_priced naming the tool; priced (0 included) or no price at all: allowed', () => {
  const body = { tools: [{ name: 'x', input_schema: {} }, CE] } as any;
  for (const price of [{ codeExecution: null }, {}, { codeExecution: -1 }, { codeExecution: 1.5 }]) {
    expect(() => requireCodeExecutionPrice(body, price, 'm')).toThrow(expect.objectContaining({ status: 403, code: 'tool_not_priced', param: 'tools.1' }));
  }
  for (const price of [{ codeExecution: 0 }, { codeExecution: 2084 }, undefined]) expect(() => requireCodeExecutionPrice(body, price, 'm')).not.toThrow();
  expect(() => requireCodeExecutionPrice({ tools: [{ name: 'x', input_schema: {} }] } as any, {}, 'm')).not.toThrow();
});

test('calls in a JSON answer: server_tool_use blocks with one of the three names', () => {
  expect(countCodeExecutionCalls([
    { type: 'server_tool_use', name: 'code_execution' }, { type: 'server_tool_use', name: 'bash_code_execution' },
    { type: 'server_tool_use', name: 'text_editor_code_execution' }, { type: 'server_tool_use', name: 'web_search' },
    { type: 'tool_use', name: 'code_execution' }, { type: 'bash_code_execution_tool_result' }, null,
  ])).toBe(3);
  expect(countCodeExecutionCalls(undefined)).toBe(0);
});
