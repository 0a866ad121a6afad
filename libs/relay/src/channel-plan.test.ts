import { describe, expect, test } from 'bun:test';
import { measureRequestTokens, type MessagesRequest } from '@gw/formats';
import { basePlan, remeasure, type PlanDeps } from './channel-plan';

const deps: PlanDeps = { price: () => undefined, worstCase: () => ({ amount: 0, limits: { maxInput: 0, maxOutput: 0, input: 0 } }) };
const conversation = [
  { role: 'user', content: 'Hello 世界 '.repeat(40) },
  { role: 'assistant', content: [{ type: 'text', text: 'Hi' }, { type: 'tool_use', id: 't', name: 'grep', input: { q: 'x'.repeat(99) } }] },
  { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: 'found '.repeat(33) }] },
] as MessagesRequest['messages'];
const tool = (name: string, type?: string) => ({ name, ...(type ? { type } : {}), description: `does ${name}`, input_schema: { type: 'object' } });

describe('remeasure', () => {
  const bodies: Array<[string, Partial<MessagesRequest> & Record<string, unknown>, Partial<MessagesRequest> & Record<string, unknown>]> = [
    ['system added', {}, { system: 'Be brief. '.repeat(500) }],
    ['system replaced by blocks', { system: 'old '.repeat(300) }, { system: [{ type: 'text', text: 'new 新 '.repeat(70) }] }],
    ['tools removed', { tools: [tool('a'), tool('b')] }, {}],
    ['tools replaced', { tools: [tool('a')] }, { tools: [tool('c'), tool('d'), tool('e')] }],
    ['a server tool added', {}, { tools: [tool('web', 'web_search_20250305')] }],
    ['a server tool removed', { tools: [tool('web', 'web_search_20250305')] }, { tools: [tool('a')] }],
    ['mcp servers added', {}, { mcp_servers: [{ url: 'https://x' }] }],
  ];
  for (const [name, from, to] of bodies) {
    for (const media of [false, true]) {
      test(`${name}${media ? ', with an unmeasurable document in the conversation' : ''}: equals measuring the whole body`, () => {
        const messages = media
          ? [...conversation, { role: 'user', content: [{ type: 'document', source: { type: 'url', url: 'https://x/a.pdf' } }] }] as MessagesRequest['messages']
          : conversation;
        const old = { model: 'm', max_tokens: 10, messages, ...from } as MessagesRequest;
        const next = { model: 'm', max_tokens: 10, messages, ...to } as MessagesRequest;
        expect(remeasure(basePlan(old, measureRequestTokens(old), deps), next)).toEqual(measureRequestTokens(next));
      });
    }
  }
});
