import { describe, expect, test } from 'bun:test';
import { StreamStartJudge } from '@gw/providers';
import { readStreamStart } from './stream-start-read';

const enc = new TextEncoder();
/** A reader over `parts`, each a chunk; `hang` leaves the read after them pending until `release` is called. */
function reader(parts: string[], o: { hang?: boolean } = {}) {
  let release = () => {};
  const gate = new Promise<void>((r) => { release = r; });
  let i = 0;
  const stream = new ReadableStream<Uint8Array>({
    async pull(c) {
      if (i < parts.length) return c.enqueue(enc.encode(parts[i++]!));
      if (o.hang) {
        await gate;
        c.enqueue(enc.encode('data: late\n\n'));
      }
      c.close();
    },
  });
  const r = stream.getReader() as ReadableStreamDefaultReader<Uint8Array>;
  return { r, first: async () => (await r.read()).value!, release: () => release() };
}
const text = (b: Uint8Array) => new TextDecoder().decode(b);
const ERR = `data: ${JSON.stringify({ error: { type: 'overloaded_error', message: 'x' } })}\n\n`;
const CONTENT = 'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n';
const ROLE = 'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}],"usage":null}\n\n';
const START = 'event: message_start\ndata: {"type":"message_start","message":{"content":[],"usage":{"input_tokens":9}}}\n\n';

describe('readStreamStart', () => {
  test('a first chunk holding a whole first event decides at once, nothing more read', async () => {
    const s = reader([CONTENT, 'data: more\n\n']);
    const out = await readStreamStart(s.r, await s.first(), new StreamStartJudge());
    expect(out).toMatchObject({ error: null, notEventStream: false, pending: null });
    expect(text(out.bytes)).toBe(CONTENT);
  });

  test('comments and an error event split over chunks: read until it is whole, every byte kept', async () => {
    const parts = [': keep-alive\n\n', ERR.slice(0, 10), ERR.slice(10, 30), ERR.slice(30)];
    const s = reader([...parts, 'data: after\n\n']);
    const out = await readStreamStart(s.r, await s.first(), new StreamStartJudge());
    expect(out.error?.error.status).toBe(503);
    expect(text(out.bytes)).toBe(parts.join(''));
  });

  test('a ping first (by name, or a data-only ping) is skipped: the error after it decides', async () => {
    for (const ping of ['event: ping\ndata: {"type": "ping"}\n\n', 'data: {"type":"ping"}\n\n']) {
      const s = reader([ping, ERR]);
      expect((await readStreamStart(s.r, await s.first(), new StreamStartJudge())).error?.error.status).toBe(503);
    }
    const plain = reader(['data: {"choices":[{"delta":{"content":"no ping"}}]}\n\n', ERR]);
    expect((await readStreamStart(plain.r, await plain.first(), new StreamStartJudge())).error).toBeNull();
  });

  test('the end before a whole event (an event without its blank line is discarded, as the stream reader does): no verdict, empty', async () => {
    const s = reader([': c\n\n', ERR.trimEnd()]);
    const out = await readStreamStart(s.r, await s.first(), new StreamStartJudge());
    expect(out).toMatchObject({ error: null, notEventStream: false, pending: null, empty: true });
    expect(text(out.bytes)).toBe(`: c\n\n${ERR.trimEnd()}`);
  });

  test('the end after comments or pings only: empty; after a whole event that is no error: not empty', async () => {
    for (const parts of [[': a\n\n', ': b\n\n'], ['event: ping\ndata: {"type": "ping"}\n\n'], ['\n', '\n']]) {
      const s = reader(parts);
      expect(await readStreamStart(s.r, await s.first(), new StreamStartJudge())).toMatchObject({ error: null, empty: true });
    }
    const s = reader([': a\n\n', CONTENT]);
    expect((await readStreamStart(s.r, await s.first(), new StreamStartJudge())).empty).toBe(false);
  });

  test('past the byte bound without a verdict: committed as it is', async () => {
    const comment = `: ${'x'.repeat(1000)}\n`;
    const s = reader(Array.from({ length: 20 }, () => comment).concat(ERR));
    const out = await readStreamStart(s.r, await s.first(), new StreamStartJudge(), { maxBytes: 4000 });
    expect(out.error).toBeNull();
    expect(out.bytes.byteLength).toBeGreaterThanOrEqual(4000);
    expect(out.bytes.byteLength).toBeLessThan(6000);
  });

  test('past the time bound: committed, and the read in flight is handed over with its bytes', async () => {
    const s = reader([': thinking\n\n'], { hang: true });
    const t0 = performance.now();
    const out = await readStreamStart(s.r, await s.first(), new StreamStartJudge(), { maxMs: 100 });
    expect(performance.now() - t0).toBeLessThan(1000);
    expect(out.error).toBeNull();
    expect(out.pending).not.toBeNull();
    s.release();
    expect(text((await out.pending!).value!)).toBe('data: late\n\n');
  });

  test('whitespace, then an HTML page: no event stream', async () => {
    const s = reader(['\n\n', '<html>502</html>']);
    expect((await readStreamStart(s.r, await s.first(), new StreamStartJudge())).notEventStream).toBe(true);
    const j = reader(['{"error":{"message":"x"}}']);
    expect((await readStreamStart(j.r, await j.first(), new StreamStartJudge())).notEventStream).toBe(true);
  });
  test('a start sent a byte per read holds no more than its bytes while it is read (no per-read leftovers)', async () => {
    const n = 65_000;
    let i = 0;
    const colon = new Uint8Array([0x3a]);
    const stream = new ReadableStream<Uint8Array>({ pull(c) { if (i++ < n) c.enqueue(i === 1 ? enc.encode(': c\n\n') : colon); else c.close(); } }, { highWaterMark: 0 });
    const r = stream.getReader() as ReadableStreamDefaultReader<Uint8Array>;
    const first = (await r.read()).value!;
    const judge = new StreamStartJudge();
    const push = judge.push.bind(judge);
    let grown = 0;
    let k = 0;
    Bun.gc(true);
    const before = process.memoryUsage().heapUsed;
    // Measured just before the end, while the reads are still being awaited.
    judge.push = (c: Uint8Array) => { if (++k === n - 100) grown = process.memoryUsage().heapUsed - before; return push(c); };
    const out = await readStreamStart(r, first, judge, { maxBytes: 1 << 20 });
    expect(out.bytes.byteLength).toBe(5 + n - 1);
    // The bytes, the parser's line and the parts list are well under 2 MB; a reaction left per read was about 6 MB.
    expect(grown).toBeLessThan(2_000_000);
  }, 20_000);

  test('events that show the client nothing are read past: the error after them decides, every byte kept', async () => {
    const starts = [[ROLE], ['data: {"choices":[]}\n\n'], ['data: {}\n\n', ': c\n\n'], [START], ['event: ping\ndata: {"type": "ping"}\n\n', START], ['data: {"type":"message_start","message":{}}\n\n']];
    for (const parts of starts) {
      for (const joined of [false, true]) {
        const all = joined ? [parts.join('') + ERR] : [...parts, ERR];
        const s = reader([...all, CONTENT]);
        const out = await readStreamStart(s.r, await s.first(), new StreamStartJudge());
        expect(out.error?.error.status).toBe(503);
        expect(text(out.bytes)).toBe(all.join(''));
      }
    }
  });

  test('the first event with content decides for the stream, whatever follows; an empty one alone, then the end, is empty', async () => {
    const content = [CONTENT, 'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f"}}]}}]}\n\n',
      'data: {"choices":[{"index":0,"delta":{"reasoning_content":"r"}}]}\n\n', 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
      'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n', 'data: [DONE]\n\n',
      'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'];
    for (const c of content) {
      const s = reader([ROLE + START.replace(/^event: message_start\n/, '') + c, ERR]);
      const out = await readStreamStart(s.r, await s.first(), new StreamStartJudge());
      expect(out).toMatchObject({ error: null, pending: null });
      expect(text(out.bytes)).not.toContain('overloaded');
    }
    for (const parts of [[ROLE], [START, 'event: ping\ndata: {"type": "ping"}\n\n']]) {
      const s = reader(parts);
      expect(await readStreamStart(s.r, await s.first(), new StreamStartJudge())).toMatchObject({ error: null, empty: true });
    }
  });

  test('empty events past the byte bound: committed as they are, nothing read lost', async () => {
    const parts = Array.from({ length: 40 }, () => ROLE);
    const s = reader([...parts, ERR]);
    const out = await readStreamStart(s.r, await s.first(), new StreamStartJudge(), { maxBytes: 4000 });
    expect(out.error).toBeNull();
    expect(out.bytes.byteLength).toBeGreaterThanOrEqual(4000);
    expect(text(out.bytes)).toBe(parts.slice(0, out.bytes.byteLength / ROLE.length).join(''));
  });
});
