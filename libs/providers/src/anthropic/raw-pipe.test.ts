import { describe, expect, test } from 'bun:test';
import { SseEventTooLargeError } from '@gw/formats';
import { sseFramer } from '../sse-pipe';
import { AnthropicFramer } from './raw-pipe';
import { AnthropicStreamMachine } from './stream';

const enc = new TextEncoder();
const dec = new TextDecoder();
const ev = (type: string, extra: object = {}) => `event: ${type}\ndata: ${JSON.stringify({ type, ...extra })}\n\n`;
const STREAM = ev('message_start', { message: { id: 'm', type: 'message', role: 'assistant', model: 'upstream-model', content: [], usage: { input_tokens: 9, output_tokens: 1 } } })
  + ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) + ': comment\n\n' + ev('ping')
  + ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hé 世界 "quoted"' } }) + '\n'
  + ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: ' more text for the estimate' } }) + ev('content_block_stop', { index: 0 })
  + ev('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 7 } }) + ev('message_stop');

/** Output and outcome of a framer over `text` cut at `cuts`. */
function run(kind: 'raw' | 'generic', text: string, cuts: number[]) {
  const m = new AnthropicStreamMachine({ requestedModel: 'alias' });
  const f = kind === 'raw' ? new AnthropicFramer(m) : sseFramer(m);
  const bytes = enc.encode(text);
  let out = '';
  let at = 0;
  for (const c of [...cuts, bytes.length]) {
    for (const b of f.push(bytes.slice(at, c))) out += dec.decode(b, { stream: true });
    at = c;
  }
  for (const b of f.end()) out += dec.decode(b);
  return { out, result: m.result() };
}

describe('AnthropicFramer', () => {
  test('nothing after message_stop reaches the client, on both paths and every split', () => {
    const after = ev('ping') + ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'late' } }) + ev('message_stop');
    const want = run('generic', STREAM, []);
    expect(run('generic', STREAM + after, []).out).toBe(want.out);
    expect(want.out.endsWith(ev('message_stop'))).toBe(true);
    const len = enc.encode(STREAM + after).length;
    for (let i = len - 200; i < len; i += 7) expect(run('raw', STREAM + after, [i]).out).toBe(want.out);
    expect(run('raw', STREAM + after, []).result.estimatedUsage).toEqual(want.result.estimatedUsage);
  });

  test('output estimate without reported usage: the same as the generic path for every split (ASCII-only chunks and mixed ones)', () => {
    const cut = STREAM.slice(0, STREAM.indexOf('event: message_delta'));
    const want = run('generic', cut, []);
    expect(want.result.usage).toBeNull();
    expect(want.result.estimatedUsage.output_tokens).toBeGreaterThan(1);
    const len = enc.encode(cut).length;
    for (let i = 1; i < len; i++) expect(run('raw', cut, [i]).result).toEqual(want.result);
  });

  test('byte-identical to the generic parser path for every split point, and byte by byte', () => {
    const want = run('generic', STREAM, []);
    expect(want.out).toContain('"model":"alias"');
    expect(want.result).toMatchObject({ complete: true, usage: { input_tokens: 9, output_tokens: 7 } });
    const len = enc.encode(STREAM).length;
    for (let i = 1; i < len; i++) expect(run("raw", STREAM, [i])).toEqual(want);
    expect(run('raw', STREAM, Array.from({ length: len - 1 }, (_, i) => i + 1))).toEqual(want);
  });

  test('runs of blank lines between events are dropped in one pass: the same as the generic path for every split', () => {
    const runs = STREAM.replace(/\n\n/g, '\n\n\n\n\n');
    const want = run('generic', STREAM, []);
    expect(run('generic', runs, [])).toEqual(want);
    const len = enc.encode(runs).length;
    for (let i = 1; i < len; i++) expect(run('raw', runs, [i])).toEqual(want);
    expect(run('raw', runs, Array.from({ length: len - 1 }, (_, i) => i + 1))).toEqual(want);
  });

  test('needles searched in place in a many-event chunk: usage hidden in deltas, escapes, other pieces, the same as the generic path', () => {
    // Every event kind the framer may forward raw, with the needles it looks for placed in some events and not in
    // their neighbours, so that a needle found ahead for one event must not be taken for a later or earlier one's.
    const delta = (d: object, extra: object = {}) => ev('content_block_delta', { index: 0, delta: d, ...extra });
    const body = ev('message_start', { message: { id: 'm', type: 'message', role: 'assistant', model: 'up', content: [], usage: { input_tokens: 9, output_tokens: 1 } } })
      + ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } })
      + delta({ type: 'text_delta', text: 'plain' }) + delta({ type: 'text_delta', text: 'says "usage" in text' })
      + delta({ type: 'text_delta', text: 'x' }, { usage: { output_tokens: 40, input_tokens: 12 } })
      + delta({ type: 'text_delta', text: 'caf\u00e9' }) + delta({ type: 'input_json_delta', partial_json: '{"a":"b"}' })
      + delta({ type: 'thinking_delta', thinking: 'hmm' }) + delta({ type: 'text_delta', text: '' })
      + 'event: ping\ndata: {"type":"ping","us\\u0061ge":{"output_tokens":60}}\n\n'
      + 'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"caf\\u00e9 \\u003c"}}\n\n'
      + ev('ping', { note: 'content_block_start' }) + ev('content_block_stop', { index: 0 })
      + ev('content_block_start', { index: 1, content_block: { type: 'server_tool_use', id: 's1', name: 'code_execution', input: {} } })
      + ev('content_block_stop', { index: 1 }) + delta({ type: 'text_delta', text: 'tail words here' });
    for (const text of [body, body + ev('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 70 } }) + ev('message_stop')]) {
      const want = run('generic', text, []);
      expect(run('raw', text, [])).toEqual(want);
      const len = enc.encode(text).length;
      for (let i = 1; i < len; i += 13) expect(run('raw', text, [i, Math.min(len, i + 300)])).toEqual(want);
    }
    expect(run('raw', body, []).result.codeExecutionCalls).toBe(1);
  });

  test('\\r\\n line ends fall back to the generic parser (same output)', () => {
    const crlf = STREAM.replace(/\n/g, '\r\n');
    const want = run('generic', crlf, []);
    expect(want.result.complete).toBe(true);
    for (const cut of [5, 200, 400]) expect(run('raw', crlf, [cut])).toEqual(want);
  });

  test('an upstream error event is replaced and stops the stream; an oversized event throws', () => {
    const withError = STREAM.slice(0, 400) + '\n\n' + ev('error', { error: { type: 'overloaded_error', message: 'key sk-secret-123456' } }) + ev('message_stop');
    const r = run('raw', withError.slice(withError.indexOf('event: content_block_start')), []);
    expect(r.out).not.toContain('sk-secret');
    expect(r.out.trim().endsWith('"message":"The upstream is overloaded; the answer was cut short."}}')).toBe(true);
    const f = new AnthropicFramer(new AnthropicStreamMachine({ requestedModel: 'x' }), 1000);
    expect(() => f.push(enc.encode(`event: content_block_delta\ndata: ${'x'.repeat(2000)}`))).toThrow(SseEventTooLargeError);
  });
});

describe('hostile chunks', () => {
  test('a chunk of many deltas without quotes costs time linear in its size (the backward search stops at the event)', () => {
    // 100,000 quote-free deltas in one 3.6 MB chunk: searched back through the chunk per event, 60,000 took 6 s.
    const hostile = ev('message_start', { message: { id: 'm', type: 'message', role: 'assistant', model: 'up', content: [], usage: { input_tokens: 9, output_tokens: 1 } } })
      + 'event: content_block_delta\ndata: 1\n\n'.repeat(100_000);
    const t0 = performance.now();
    const want = run('generic', hostile, []);
    const generic = performance.now() - t0;
    const t1 = performance.now();
    const got = run('raw', hostile, []);
    const raw = performance.now() - t1;
    expect(got).toEqual(want);
    expect(raw).toBeLessThan(Math.max(3_000, 20 * generic));
  }, 60_000);

  test('chunks that are views into a larger buffer (a byte offset) frame as the generic path does', () => {
    const bytes = enc.encode('x'.repeat(37) + STREAM);
    const m = new AnthropicStreamMachine({ requestedModel: 'alias' });
    const f = new AnthropicFramer(m);
    let out = '';
    for (let at = 37; at < bytes.length; at += 53) for (const b of f.push(bytes.subarray(at, Math.min(at + 53, bytes.length)))) out += dec.decode(b, { stream: true });
    for (const b of f.end()) out += dec.decode(b);
    expect({ out, result: m.result() }).toEqual(run('generic', STREAM, []));
  });
});

describe('code-execution calls', () => {
  const call = (i: number, name: string) => ev('content_block_start', { index: i, content_block: { type: 'server_tool_use', id: `srvtoolu_${i}`, name, input: {} } })
    + ev('content_block_delta', { index: i, delta: { type: 'input_json_delta', partial_json: '{"command":"ls"}' } }) + ev('content_block_stop', { index: i })
    + ev('content_block_start', { index: i + 1, content_block: { type: `${name}_tool_result`, tool_use_id: `srvtoolu_${i}`, content: { type: `${name}_result`, stdout: 'a', stderr: '', return_code: 0 } } })
    + ev('content_block_stop', { index: i + 1 });
  const START = ev('message_start', { message: { id: 'm', type: 'message', role: 'assistant', model: 'up', content: [], usage: { input_tokens: 9, output_tokens: 1 } } });
  // A web search and a custom tool named like the tool are not calls; a text mentioning it neither.
  const BODY = START + call(0, 'code_execution') + call(2, 'bash_code_execution') + call(4, 'text_editor_code_execution')
    + ev('content_block_start', { index: 6, content_block: { type: 'server_tool_use', id: 's', name: 'web_search', input: {} } }) + ev('content_block_stop', { index: 6 })
    + ev('content_block_start', { index: 7, content_block: { type: 'tool_use', id: 't', name: 'code_execution', input: {} } }) + ev('content_block_stop', { index: 7 })
    + ev('content_block_start', { index: 8, content_block: { type: 'text', text: '' } })
    + ev('content_block_delta', { index: 8, delta: { type: 'text_delta', text: 'code_execution' } }) + ev('content_block_stop', { index: 8 });
  const END = ev('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 7 } }) + ev('message_stop');
  test('each server_tool_use block with a code-execution name counts once, on both paths and every split', () => {
    for (const kind of ['raw', 'generic'] as const) {
      expect(run(kind, BODY + END, []).result.codeExecutionCalls).toBe(3);
      const len = enc.encode(BODY + END).length;
      for (let i = 1; i < len; i += 97) expect(run(kind, BODY + END, [i]).result.codeExecutionCalls).toBe(3);
    }
  });
  test('a stream cut before its message_delta counts the calls delivered', () => {
    expect(run('raw', START + call(0, 'code_execution') + call(2, 'code_execution'), []).result.codeExecutionCalls).toBe(2);
    expect(run('raw', START, []).result.codeExecutionCalls).toBe(0);
  });
});
