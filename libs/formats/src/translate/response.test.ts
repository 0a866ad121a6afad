import { describe, expect, test } from 'bun:test';
import { fromOpenAICompletion } from './response';
import type { ChatCompletion } from '../openai/types';
import { estimateTextTokens } from '../tokens';
import cases from '../../../../tests/fixtures/translation/responses.json';

describe('fromOpenAICompletion golden cases (responses.json)', () => {
  for (const c of cases) {
    test(c.name, () => {
      const out = fromOpenAICompletion(c.openai as unknown as ChatCompletion, c.options);
      expect(out.message).toEqual(c.anthropic as any);
      expect(out.usage).toEqual(c.anthropic.usage);
      expect(out.badToolArguments).toEqual(c.badToolArguments);
    });
  }

  test('missing usage is reported as null; message.usage is the estimate billed (input pre-count, output from the content); a fresh msg_ id is generated', () => {
    const content = 'Once upon a time a fox met a crow who held a piece of cheese in her beak.';
    const out = fromOpenAICompletion({ id: 'x', object: 'chat.completion', created: 1, model: 'u', choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }] }, { requestedModel: 'r', inputTokens: 17 });
    expect(out.usage).toBeNull();
    const output = estimateTextTokens(JSON.stringify([{ type: 'text', text: content }]));
    expect(output).toBeGreaterThan(0);
    expect(out.message.usage).toEqual({ input_tokens: 17, output_tokens: output, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 });
    expect(out.estimatedUsage).toEqual(out.message.usage);
    expect(out.message.id).toMatch(/^msg_[0-9A-Za-z]{24}$/);
  });

  test('tool calls with finish_reason "stop" (named tool_choice) end in tool_use; length stays max_tokens', () => {
    const completion = (finish: string, stop_reason?: string) => ({
      id: 'x', object: 'chat.completion', created: 1, model: 'u', usage: { prompt_tokens: 30, completion_tokens: 8, total_tokens: 38 },
      choices: [{ index: 0, finish_reason: finish, stop_reason, message: { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'record_contact', arguments: '{"name":"Jane Doe"}' } }] } }],
    }) as unknown as ChatCompletion;
    const m = fromOpenAICompletion(completion('stop'), { requestedModel: 'r' }).message;
    expect(m).toMatchObject({ stop_reason: 'tool_use', stop_sequence: null, content: [{ type: 'tool_use', id: 'call_1', name: 'record_contact', input: { name: 'Jane Doe' } }] });
    expect(fromOpenAICompletion(completion('stop', 'END'), { requestedModel: 'r', stopSequences: ['END'] }).message).toMatchObject({ stop_reason: 'tool_use', stop_sequence: null });
    expect(fromOpenAICompletion(completion('length'), { requestedModel: 'r' }).message.stop_reason).toBe('max_tokens');
  });
});
