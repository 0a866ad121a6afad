import { describe, expect, test } from 'bun:test';
import { ChatStreamTranslator } from './stream';
import { streamFixtures, fullChunk } from '../../../../tests/fixtures/translation/load';

describe('ChatStreamTranslator golden sequences', () => {
  for (const fx of streamFixtures()) {
    test(`${fx.name}: ${fx.description}`, () => {
      const t = new ChatStreamTranslator(fx.options);
      const events = fx.chunks.flatMap((c) => t.push(fullChunk(c)));
      events.push(...(fx.done ? t.finish() : t.fail(fx.failMessage!)));
      expect(events).toEqual(fx.expected);
      expect(t.outcome()).toEqual(fx.outcome);
    });
  }
});

describe('ChatStreamTranslator edges', () => {
  const opts = { requestedModel: 'm', id: 'msg_x' };

  test('nothing is emitted after finish or fail, and finish is idempotent', () => {
    const t = new ChatStreamTranslator(opts);
    const first = t.finish();
    expect(first.map((e) => e.type)).toEqual(['message_start', 'ping', 'message_delta', 'message_stop']);
    expect(t.finish()).toEqual([]);
    expect(t.fail('late')).toEqual([]);
    expect(t.push(fullChunk({ choices: [{ index: 0, delta: { content: 'x' }, finish_reason: null }] }))).toEqual([]);
  });

  test('a tool call without an id gets a unique toolu_ id derived from the message id', () => {
    const t = new ChatStreamTranslator(opts);
    const ev = t.push(fullChunk({ choices: [{ index: 0, delta: { tool_calls: [{ index: 3, function: { name: 'f', arguments: '{}' } }] }, finish_reason: null }] }));
    expect(ev[2]).toEqual({ type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id: 'toolu_x_3', name: 'f', input: {} } });
  });

  test('renamed tool names come back as the client\'s names; reasoning before a tool call gets index 0, the call 1', () => {
    const t = new ChatStreamTranslator({ ...opts, toolNames: { mcp__fs__read_file_1a2b3c4d: 'mcp__fs__read.file' } });
    const ev = [
      ...t.push(fullChunk({ choices: [{ index: 0, delta: { reasoning_content: 'hmm' }, finish_reason: null }] })),
      ...t.push(fullChunk({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: 'c1', function: { name: 'mcp__fs__read_file_1a2b3c4d', arguments: '{}' } }] }, finish_reason: 'tool_calls' }] })),
      ...t.finish(),
    ];
    expect(ev.filter((e) => e.type === 'content_block_start')).toEqual([
      { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } },
      { type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'c1', name: 'mcp__fs__read.file', input: {} } },
    ]);
    expect(ev.find((e) => e.type === 'message_delta')).toMatchObject({ delta: { stop_reason: 'tool_use' } });
  });

  test('without finish_reason a stream with tool calls ends as tool_use', () => {
    const t = new ChatStreamTranslator(opts);
    t.push(fullChunk({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: 'c', function: { name: 'f' } }] }, finish_reason: null }] }));
    const end = t.finish();
    expect(end.find((e) => e.type === 'message_delta')).toMatchObject({ delta: { stop_reason: 'tool_use' } });
  });

  test('content_filter maps to refusal; text after a thinking block opens a new block', () => {
    const t = new ChatStreamTranslator(opts);
    t.push(fullChunk({ choices: [{ index: 0, delta: { reasoning: 'r' }, finish_reason: null }] }));
    const ev = t.push(fullChunk({ choices: [{ index: 0, delta: { content: 'a' }, finish_reason: 'content_filter' }] }));
    expect(ev.map((e) => e.type)).toEqual(['content_block_stop', 'content_block_start', 'content_block_delta', 'content_block_stop']);
    expect(t.finish()[0]).toMatchObject({ type: 'message_delta', delta: { stop_reason: 'refusal' } });
  });
});

describe('ChatStreamTranslator upstream quirks', () => {
  const opts = { requestedModel: 'm', id: 'msg_x', inputTokens: 5 };
  const ck = (delta: object, finish: string | null = null) => fullChunk({ choices: [{ index: 0, delta, finish_reason: finish }] } as any);
  const run = (chunks: ReturnType<typeof ck>[], o: object = opts) => {
    const t = new ChatStreamTranslator({ ...opts, ...o });
    const events = [...chunks.flatMap((c) => t.push(c)), ...t.finish()];
    return { t, events, blocks: blocksOf(events) };
  };
  /** The content blocks as a client assembles them: [start block, joined deltas]. */
  const blocksOf = (events: any[]) => events.filter((e) => e.type === 'content_block_start').map((s) => [s.content_block,
    events.filter((e) => e.type === 'content_block_delta' && e.index === s.index).map((e) => e.delta.partial_json ?? e.delta.text ?? e.delta.thinking).join('')]);
  const stopOf = (events: any[]) => events.find((e) => e.type === 'message_delta').delta;

  test('a tool name arriving after the first fragment (id and empty arguments first) names the block', () => {
    const { events, blocks } = run([
      ck({ role: 'assistant', content: '' }),
      ck({ tool_calls: [{ index: 0, id: 'call_123', type: 'function', function: { arguments: '' } }] }),
      ck({ tool_calls: [{ index: 0, function: { name: 'bash' } }] }),
      ck({ tool_calls: [{ index: 0, function: { arguments: '{"command":"ls -la"}' } }] }),
      ck({}, 'tool_calls'),
    ]);
    expect(blocks).toEqual([[{ type: 'tool_use', id: 'call_123', name: 'bash', input: {} }, '{"command":"ls -la"}']]);
    expect(events.filter((e) => e.type === 'content_block_start')).toHaveLength(1);
  });

  test('an empty name in the opening delta waits for the real one; arguments sent before the name are kept', () => {
    const { blocks } = run([
      ck({ tool_calls: [{ index: 0, id: 'call_x', type: 'function', function: { name: '', arguments: '{"comm' } }] }),
      ck({ tool_calls: [{ index: 0, id: 'call_x', type: 'function', function: { name: 'bash', arguments: 'and":"ls"}' } }] }),
      ck({}, 'tool_calls'),
    ]);
    expect(blocks).toEqual([[{ type: 'tool_use', id: 'call_x', name: 'bash', input: {} }, '{"command":"ls"}']]);
  });

  test('the id is taken from a later fragment when the first had none; a call never named is emitted at the end as before', () => {
    const { blocks } = run([
      ck({ tool_calls: [{ index: 0, function: { arguments: '{}' } }] }),
      ck({ tool_calls: [{ index: 0, id: 'call_late', function: { name: 'f' } }] }),
      ck({ tool_calls: [{ index: 1, function: { arguments: '{"a":1}' } }] }),
    ]);
    expect(blocks).toEqual([
      [{ type: 'tool_use', id: 'call_late', name: 'f', input: {} }, '{}'],
      [{ type: 'tool_use', id: 'toolu_x_1', name: '', input: {} }, '{"a":1}'],
    ]);
  });

  test('text between fragments of interleaved calls no longer cuts them: it follows them as its own block', () => {
    const { blocks } = run([
      ck({ role: 'assistant', content: '' }),
      ck({ tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'read_file', arguments: '{"path":' } }] }),
      ck({ tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'read_file', arguments: '{"path":' } }] }),
      ck({ content: '\n' }),
      ck({ tool_calls: [{ index: 0, function: { arguments: '"a.txt"}' } }, { index: 1, function: { arguments: '"b.txt"}' } }] }),
      ck({}, 'tool_calls'),
    ]);
    expect(blocks).toEqual([
      [{ type: 'tool_use', id: 'call_a', name: 'read_file', input: {} }, '{"path":"a.txt"}'],
      [{ type: 'tool_use', id: 'call_b', name: 'read_file', input: {} }, '{"path":"b.txt"}'],
      [{ type: 'text', text: '' }, '\n'],
    ]);
  });

  test('reasoning and text held behind a live call keep their order, and the stream ends with every block closed', () => {
    const { events, blocks } = run([
      ck({ tool_calls: [{ index: 0, id: 'c', function: { name: 'f', arguments: '{"a"' } }] }),
      ck({ reasoning_content: 'r1' }), ck({ reasoning_content: 'r2' }), ck({ content: 't' }),
      ck({ tool_calls: [{ index: 0, function: { arguments: ':1}' } }] }),
    ]);
    expect(blocks).toEqual([
      [{ type: 'tool_use', id: 'c', name: 'f', input: {} }, '{"a":1}'],
      [{ type: 'thinking', thinking: '', signature: '' }, 'r1r2'],
      [{ type: 'text', text: '' }, 't'],
    ]);
    const starts = events.filter((e) => e.type === 'content_block_start').length;
    expect(events.filter((e) => e.type === 'content_block_stop')).toHaveLength(starts);
  });

  test('tool calls with finish_reason "stop" (named tool_choice) end in tool_use, never end_turn or stop_sequence', () => {
    const calls = [ck({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'record_contact', arguments: '' } }] }),
      ck({ tool_calls: [{ index: 0, function: { arguments: '{"name":"Jane Doe"}' } }] })];
    expect(stopOf(run([...calls, ck({}, 'stop')]).events)).toEqual({ stop_reason: 'tool_use', stop_sequence: null });
    const stopSeq = fullChunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop', stop_reason: 'END' }] } as any);
    expect(stopOf(run([...calls, stopSeq], { stopSequences: ['END'] }).events)).toEqual({ stop_reason: 'tool_use', stop_sequence: null });
    expect(stopOf(run([...calls, ck({}, 'length')]).events)).toEqual({ stop_reason: 'max_tokens', stop_sequence: null });
    expect(stopOf(run([ck({ content: 'a' }), stopSeq], { stopSequences: ['END'] }).events)).toEqual({ stop_reason: 'stop_sequence', stop_sequence: 'END' });
  });
});

describe('ChatStreamTranslator caps what it holds', () => {
  const c = (delta: object, finish: 'tool_calls' | null = null) => fullChunk({ choices: [{ index: 0, delta, finish_reason: finish }] });
  const call = (index: number, args: string, name?: string) => c({ tool_calls: [{ index, ...(name ? { id: `call_${index}`, function: { name, arguments: args } } : { function: { arguments: args } }) }] });

  test('text and a live call\'s arguments are streamed, not held: far past the cap, the answer is whole', () => {
    const t = new ChatStreamTranslator({ requestedModel: 'm', id: 'msg_x', maxHeldChars: 200 });
    const events = [...t.push(c({ content: 'x'.repeat(1000) })), ...t.push(call(0, '{"a":"', 'f'))];
    for (let i = 0; i < 50; i++) events.push(...t.push(call(0, 'y'.repeat(150))));
    events.push(...t.push(call(0, '"}')), ...t.finish());
    expect(events.at(-1)!.type).toBe('message_stop');
    expect(events.filter((e) => e.type === 'content_block_start').length).toBe(2);
  });

  test('text and arguments held behind a live call past the cap end the stream with an error event; nothing after it', () => {
    const t = new ChatStreamTranslator({ requestedModel: 'm', id: 'msg_x', maxHeldChars: 200 });
    t.push(call(0, '{', 'f'));
    expect(t.push(call(1, `{"k":"${'a'.repeat(44)}`, 'g')).some((e) => e.type === 'error')).toBe(false);
    const ev = t.push(c({ content: 'b'.repeat(100) }));
    expect(ev.at(-1)).toEqual({ type: 'error', error: { type: 'api_error', message: expect.stringContaining('unfinished tool call') } });
    expect(t.failedWith).toContain('unfinished tool call');
    expect(t.push(c({ content: 'late' }))).toEqual([]);
    expect(t.outcome()).toMatchObject({ complete: false, failed: true });
  });

  test('output after an early completion_tokens is added to it; a failed stream adds only what it delivered', () => {
    const run = (end: (t: ChatStreamTranslator) => unknown) => {
      const t = new ChatStreamTranslator({ requestedModel: 'm', id: 'msg_x' });
      t.push(fullChunk({ choices: [], usage: { prompt_tokens: 10, completion_tokens: 1 } } as never));
      t.push(call(0, '{"k":"', 'f')); // live: delivered
      t.push(c({ content: 'x'.repeat(400) })); // held behind the live call
      end(t);
      return t.outcome().estimatedUsage.output_tokens;
    };
    const failed = run((t) => t.fail('cut'));
    const finished = run((t) => t.finish());
    expect(failed).toBeGreaterThan(1);
    expect(finished - failed).toBe(100); // the 400 held characters, delivered only by the finished stream
  });

  test('what was held is given back once emitted: holding under the cap again and again never fails', () => {
    const t = new ChatStreamTranslator({ requestedModel: 'm', id: 'msg_x', maxHeldChars: 300 });
    for (let round = 0; round < 20; round++) {
      t.push(call(round * 2, '{', 'f'));
      t.push(call(round * 2 + 1, `{"k":"${'a'.repeat(144)}`, 'g')); // held behind the live call
      t.push(c({}, 'tool_calls')); // closes the live call and emits the held one
    }
    expect(t.failedWith).toBeNull();
    const events = t.finish();
    expect(events.at(-1)!.type).toBe('message_stop');
  });
});

describe('ChatStreamTranslator: tool calls without an index', () => {
  const c = (tool_calls: object[], finish: 'tool_calls' | null = null) => fullChunk({ choices: [{ index: 0, delta: { tool_calls }, finish_reason: finish }] } as never);
  const run = (chunks: ReturnType<typeof c>[]) => {
    const t = new ChatStreamTranslator({ requestedModel: 'm', id: 'msg_x' });
    const ev = [...chunks.flatMap((ch) => t.push(ch)), ...t.finish()];
    const starts = ev.filter((e) => e.type === 'content_block_start').map((e: any) => e.content_block);
    const args = (i: number) => ev.filter((e: any) => e.type === 'content_block_delta' && e.index === i).map((e: any) => e.delta.partial_json).join('');
    return { starts, args };
  };

  test('calls sent whole and unindexed (Gemini) stay separate calls, by id or by a second name', () => {
    const byId = run([c([{ id: 'a', function: { name: 'f', arguments: '{"x":1}' } }]), c([{ id: 'b', function: { name: 'g', arguments: '{"y":2}' } }]), c([], 'tool_calls')]);
    expect(byId.starts.map((b: any) => [b.id, b.name])).toEqual([['a', 'f'], ['b', 'g']]);
    expect([byId.args(0), byId.args(1)]).toEqual(['{"x":1}', '{"y":2}']);
    const byName = run([c([{ function: { name: 'f', arguments: '{}' } }, { function: { name: 'g', arguments: '{}' } }]), c([], 'tool_calls')]);
    expect(byName.starts.map((b: any) => b.name)).toEqual(['f', 'g']);
    expect(new Set(byName.starts.map((b: any) => b.id)).size).toBe(2);
  });

  test('unindexed fragments of one call (no new id, no second name) are still one call', () => {
    const one = run([c([{ id: 'a', function: { name: 'f', arguments: '{"x"' } }]), c([{ function: { arguments: ':1}' } }]), c([{ id: 'a', function: { arguments: '' } }]), c([], 'tool_calls')]);
    expect(one.starts.map((b: any) => b.id)).toEqual(['a']);
    expect(one.args(0)).toBe('{"x":1}');
  });
});

describe('ChatStreamTranslator: a call reusing a live call\'s index (Ollama numbers every call 0)', () => {
  const opts = { requestedModel: 'm', id: 'msg_x' };
  const call = (tc: object, finish: 'tool_calls' | null = null) => fullChunk({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, ...tc }] }, finish_reason: finish }] });
  const text = (content: string) => fullChunk({ choices: [{ index: 0, delta: { content }, finish_reason: null }] });

  test('the new call closes the live one and streams as its own block at once, not at the end', () => {
    const t = new ChatStreamTranslator(opts);
    t.push(call({ id: 'call_a', function: { name: 'get', arguments: '{"a":' } }));
    // The key waited for its value (ToolArgsFilter): it comes with it.
    expect(t.push(call({ function: { arguments: '1}' } }))).toEqual([{ type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '"a":1}' } }]);
    expect(t.push(call({ id: 'call_b', function: { name: 'put', arguments: '{"b":' } }))).toEqual([
      { type: 'content_block_stop', index: 0 },
      { type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'call_b', name: 'put', input: {} } },
      { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{' } },
    ]);
    expect(t.push(call({ function: { arguments: '2}' } }))).toEqual([{ type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '"b":2}' } }]);
    const end = [...t.push(call({}, 'tool_calls')), ...t.finish()];
    expect(end.map((e) => e.type)).toEqual(['content_block_stop', 'message_delta', 'message_stop']);
    expect(end[0]).toEqual({ type: 'content_block_stop', index: 1 });
  });

  test('text that came while the first call was live goes between the two calls, in its order', () => {
    const t = new ChatStreamTranslator(opts);
    const ev = [
      ...t.push(call({ id: 'call_a', function: { name: 'get', arguments: '{}' } })),
      ...t.push(text('between')),
      ...t.push(call({ id: 'call_b', function: { name: 'get', arguments: '{}' } })),
      ...t.push(call({}, 'tool_calls')), ...t.finish(),
    ];
    const starts = ev.filter((e) => e.type === 'content_block_start').map((e: any) => [e.index, e.content_block.type, e.content_block.id]);
    expect(starts).toEqual([[0, 'tool_use', 'call_a'], [1, 'text', undefined], [2, 'tool_use', 'call_b']]);
    expect(ev.filter((e) => e.type === 'content_block_stop').map((e: any) => e.index)).toEqual([0, 1, 2]);
  });
  test('with another call still pending, the new call keeps its place behind it: the order the upstream sent them in', () => {
    const t = new ChatStreamTranslator(opts);
    const tc = (index: number, o: object) => fullChunk({ choices: [{ index: 0, delta: { tool_calls: [{ index, ...o }] }, finish_reason: null }] });
    const ev = [
      ...t.push(tc(0, { id: 'call_a', function: { name: 'get', arguments: '{"a":1}' } })),
      ...t.push(tc(1, { id: 'call_b', function: { name: 'get', arguments: '{"b":' } })),
      ...t.push(tc(0, { id: 'call_c', function: { name: 'get', arguments: '{"c":3}' } })),
      ...t.push(tc(1, { function: { arguments: '2}' } })),
      ...t.push(call({}, 'tool_calls')), ...t.finish(),
    ];
    const starts = ev.filter((e) => e.type === 'content_block_start').map((e: any) => [e.index, e.content_block.id]);
    expect(starts).toEqual([[0, 'call_a'], [1, 'call_b'], [2, 'call_c']]);
    const args = (i: number) => ev.filter((e: any) => e.type === 'content_block_delta' && e.index === i).map((e: any) => e.delta.partial_json).join('');
    expect([args(0), args(1), args(2)]).toEqual(['{"a":1}', '{"b":2}', '{"c":3}']);
  });
});
