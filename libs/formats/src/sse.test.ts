import { describe, expect, test } from 'bun:test';
import { SseEventTooLargeError, SseParser, encodeSse, encodeAnthropicEvent, errorFrame } from './sse';

const enc = new TextEncoder();

/** Feeds `text` split at every given boundary, as bytes. */
function parseSplit(text: string, cuts: number[]) {
  const bytes = enc.encode(text);
  const p = new SseParser();
  const out = [];
  let at = 0;
  for (const c of [...cuts, bytes.length]) {
    out.push(...p.push(bytes.subarray(at, c)));
    at = c;
  }
  out.push(...p.end());
  return out;
}

const SAMPLE = ': keep-alive comment\r\nevent: message_start\r\ndata: {"a":"é€😀"}\r\n\r\ndata: line1\ndata: line2\n\nevent: ping\rdata:nospace\r\rid: 7\ndata: x\n\nevent: no-data\n\ndata: [DONE]\n\n';
const EXPECTED = [
  { event: 'message_start', data: '{"a":"é€😀"}' },
  { event: undefined, data: 'line1\nline2' },
  { event: 'ping', data: 'nospace' },
  { event: undefined, data: 'x', id: '7' },
  { event: undefined, data: '[DONE]', id: '7' }, // the last event id persists (WHATWG)
];

describe('SseParser', () => {
  test('parses \\r\\n, \\n and \\r line ends, multi-line data, comments, ids; skips events without data', () => {
    expect(parseSplit(SAMPLE, [])).toEqual(EXPECTED);
  });

  test('any chunking gives the same events (every single split point, incl. inside \\r\\n and UTF-8 sequences)', () => {
    const len = enc.encode(SAMPLE).length;
    for (let i = 1; i < len; i++) expect(parseSplit(SAMPLE, [i])).toEqual(EXPECTED);
  });

  test('byte-at-a-time', () => {
    const len = enc.encode(SAMPLE).length;
    expect(parseSplit(SAMPLE, Array.from({ length: len - 1 }, (_, i) => i + 1))).toEqual(EXPECTED);
  });

  test('runs of blank lines (any line ends) between and inside events change nothing, at every split point', () => {
    const runs = SAMPLE.replace(/\n\n/g, '\n\n\n\r\n\r\r\n\n').replace(/\r\r/g, '\r\r\r\n\n');
    expect(parseSplit(runs, [])).toEqual(EXPECTED);
    const len = enc.encode(runs).length;
    for (let i = 1; i < len; i++) expect(parseSplit(runs, [i])).toEqual(EXPECTED);
    // An event still open across a blank run ends at its first blank line, and `id` survives the run.
    expect(parseSplit('id: 3\ndata: a\r\r\n\n\r\ndata: b\n\n', [6, 16])).toEqual([{ event: undefined, data: 'a', id: '3' }, { event: undefined, data: 'b', id: '3' }]);
  });

  test('a leading BOM is ignored; an unterminated last event is dropped', () => {
    expect(parseSplit('\uFEFFdata: a\n\ndata: partial', [])).toEqual([{ event: undefined, data: 'a' }]);
  });
});

describe('encoders', () => {
  test('encodeSse round-trips through the parser, multi-line data included', () => {
    const text = encodeSse('x', 'a\nb') + encodeSse(undefined, '{"k":1}');
    expect(text).toBe('event: x\ndata: a\ndata: b\n\ndata: {"k":1}\n\n');
    expect(parseSplit(text, [])).toEqual([{ event: 'x', data: 'a\nb' }, { event: undefined, data: '{"k":1}' }]);
  });

  test('Anthropic frames name the event after its type; errorFrame is an error event', () => {
    expect(encodeAnthropicEvent({ type: 'message_stop' })).toBe('event: message_stop\ndata: {"type":"message_stop"}\n\n');
    expect(errorFrame('Overloaded', 'overloaded_error')).toBe('event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n');
  });
});

describe('SseParser: linear time, bounded events', () => {
  /** ms to parse one event of `size` bytes fed in `chunk`-byte pieces. */
  function timeEvent(size: number, chunk: number, max = 64 << 20): number {
    const body = enc.encode(`data: ${'x'.repeat(size)}\n\n`);
    const p = new SseParser(max);
    const t0 = performance.now();
    let events = 0;
    for (let at = 0; at < body.length; at += chunk) events += p.push(body.subarray(at, at + chunk)).length;
    const ms = performance.now() - t0;
    expect(events).toBe(1);
    return ms;
  }

  test('one big event costs time linear in its size, whatever the chunking', () => {
    timeEvent(1 << 20, 1024); // warm-up
    // Absolute bounds far from both sides: linear parsing of 8 MB takes 2-80 ms here (mostly allocation and GC,
    // which made a ratio of two small timings flaky: 60x once under load), while a rescan of the buffered event
    // per chunk reads 8 MB / chunk × 4 MB on average: 5·10^11 bytes in 64-byte chunks, 2·10^9 in 16 KiB ones.
    expect(Math.min(timeEvent(8 << 20, 64), timeEvent(8 << 20, 64))).toBeLessThan(2000);
    expect(Math.min(timeEvent(32 << 20, 16 * 1024), timeEvent(32 << 20, 16 * 1024))).toBeLessThan(2000);
    // 1-byte chunks: 1 MB in well under the time a rescan per chunk needs (≈ 10^12 char reads).
    expect(timeEvent(1 << 20, 1)).toBeLessThan(5000);
  });

  test('an event over the cap throws SseEventTooLargeError, both as one long line and as many data lines', () => {
    const p = new SseParser(1000);
    expect(() => p.push(`data: ${'x'.repeat(2000)}`)).toThrow(SseEventTooLargeError);
    const q = new SseParser(1000);
    expect(() => { for (let i = 0; i < 50; i++) q.push(`data: ${'y'.repeat(40)}\n`); }).toThrow(SseEventTooLargeError);
    // Many events under the cap are fine: the cap is per event, not per stream.
    const r = new SseParser(1000);
    let n = 0;
    for (let i = 0; i < 100; i++) n += r.push(`data: ${'z'.repeat(900)}\n\n`).length;
    expect(n).toBe(100);
  });
});
