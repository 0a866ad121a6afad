import { describe, expect, test } from 'bun:test';
import { concatBytes, GatewayError } from '@gw/core';
import { anthropicAdapter } from '@gw/providers';
import { relayStream, type StreamEnd } from './stream-relay';

const enc = new TextEncoder();
const frame = (type: string, extra: object = {}) => enc.encode(`event: ${type}\ndata: ${JSON.stringify({ type, ...extra })}\n\n`);
const START = frame('message_start', { message: { id: 'm', type: 'message', role: 'assistant', model: 'x', content: [], usage: { input_tokens: 5, output_tokens: 1 } } });
const DELTA = frame('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'hello world ' } });

/** An endless upstream (one delta per pull, `gapMs` apart) that records how it ended. */
function endless(gapMs = 0) {
  const s = { pulls: 0, cancelled: false };
  const stream = new ReadableStream<Uint8Array>({
    async pull(c) { if (gapMs) await Bun.sleep(gapMs); s.pulls++; c.enqueue(DELTA); },
    cancel() { s.cancelled = true; },
  }, { highWaterMark: 0 });
  return { s, reader: stream.getReader() as unknown as ReadableStreamDefaultReader<Uint8Array> };
}

async function start(reader: ReadableStreamDefaultReader<Uint8Array>, o: { signal?: AbortSignal; idleMs?: number; stallMs?: number; bufferBytes?: number } = {}) {
  const ends: StreamEnd[] = [];
  const res = await relayStream({
    reader, first: START, decoder: anthropicAdapter.createStreamDecoder({ requestedModel: 'x' }), signal: o.signal, requestId: 'r',
    startedAt: performance.now(), idleMs: o.idleMs ?? 5000, stallMs: o.stallMs ?? 5000, bufferBytes: o.bufferBytes ?? 1024, onEnd: (e) => { ends.push(e); },
  });
  return { res, ends };
}

describe('relayStream', () => {
  test('a large stream cut into upstream chunks at arbitrary bytes reaches the client byte for byte (large pieces are not copied into one write)', async () => {
    const events = Array.from({ length: 400 }, (_, i) => frame('content_block_delta', { index: 0, delta: { type: 'text_delta', text: `${i} `.repeat(200) } }));
    const tail = concatBytes([...events, frame('content_block_stop', { index: 0 }), frame('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 9 } }), frame('message_stop')])!;
    // Chunk sizes from 1 byte to 70 kB, so events span chunks and chunks hold many events.
    let seed = 7;
    const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    const chunks: Uint8Array[] = [];
    for (let at = 0; at < tail.byteLength;) {
      const n = Math.max(1, Math.floor(rand() ** 2 * 70_000));
      chunks.push(tail.subarray(at, at + n));
      at += n;
    }
    const reader = new ReadableStream<Uint8Array>({
      pull(c) { const next = chunks.shift(); if (next) c.enqueue(next); else c.close(); },
    }, { highWaterMark: 0 }).getReader() as unknown as ReadableStreamDefaultReader<Uint8Array>;
    const { res, ends } = await start(reader, { bufferBytes: 64 * 1024 });
    const got = new Uint8Array(await res.arrayBuffer());
    expect(Buffer.from(got).equals(Buffer.from(concatBytes([START, tail])!))).toBe(true);
    expect(ends[0]).toMatchObject({ errorCode: '', usage: { output_tokens: 9 } });
  });

  test('reads ahead at most bufferBytes (plus a chunk) of a client that does not read', async () => {
    const { s, reader } = endless();
    const { res } = await start(reader, { bufferBytes: 4096 });
    const body = res.body!.getReader();
    const taken = (await body.read()).value!.byteLength;
    await Bun.sleep(100);
    // Read from the upstream but not taken by the client (a read may hand the client several chunks at once).
    const ahead = START.byteLength + s.pulls * DELTA.byteLength - taken;
    expect(ahead).toBeLessThan(4096 + 4 * DELTA.byteLength);
    expect(ahead).toBeGreaterThan(0);
    await body.cancel();
  });

  test('an abort after the first byte ends the stream at once, cancels the upstream, settles with the reason', async () => {
    const { s, reader } = endless(20);
    const ctl = new AbortController();
    const { res, ends } = await start(reader, { signal: ctl.signal });
    const body = res.body!.getReader();
    await body.read();
    // The client does not read on; the abort alone must end everything.
    ctl.abort(new GatewayError(401, 'key_revoked', 'This API key was revoked.'));
    expect(ends).toHaveLength(1);
    expect(ends[0]).toMatchObject({ errorCode: 'key_revoked', upstreamFault: false });
    expect(ends[0]!.usage.input_tokens).toBe(5);
    await Bun.sleep(10);
    expect(s.cancelled).toBe(true);
    let text = '';
    for (let r = await body.read(); !r.done; r = await body.read()) text += new TextDecoder().decode(r.value);
    expect(text).toContain('This API key was revoked.');
  });

  test('a slow client is not a silent upstream: no idle failure while the client is behind; cut after stallMs as client_stalled', async () => {
    const { s, reader } = endless();
    const { res, ends } = await start(reader, { idleMs: 100, stallMs: 400, bufferBytes: 0 });
    const body = res.body!.getReader();
    await body.read();
    await Bun.sleep(250);
    expect(ends).toHaveLength(0); // idleMs passed, but we were waiting on the client, not the upstream
    await Bun.sleep(400);
    expect(ends).toHaveLength(1);
    expect(ends[0]).toMatchObject({ errorCode: 'client_stalled', upstreamFault: false });
    expect(s.cancelled).toBe(true);
    await expect(body.read()).rejects.toBeDefined();
  });

  test('an upstream silent while the client waits: error event, upstream fault', async () => {
    const silent = new ReadableStream<Uint8Array>({ pull: () => new Promise(() => {}) }, { highWaterMark: 0 });
    const { res, ends } = await start(silent.getReader() as unknown as ReadableStreamDefaultReader<Uint8Array>, { idleMs: 150 });
    const text = await res.text();
    expect(text).toContain('event: error');
    expect(ends[0]).toMatchObject({ errorCode: 'upstream_stream_cut', upstreamFault: true });
  });
});

describe('relayStream with a settlement that commits asynchronously (PostgreSQL mode)', () => {
  const input = (upstream: ReadableStream<Uint8Array>, onEnd: () => Promise<void>) => ({
    reader: upstream.getReader() as ReadableStreamDefaultReader<Uint8Array>, first: START, decoder: anthropicAdapter.createStreamDecoder({ requestedModel: 'x' }),
    requestId: 'r', startedAt: performance.now(), idleMs: 5000, stallMs: 5000, bufferBytes: 1024, onEnd, holdEnd: true,
  });

  /** Relays `upstream` with a settlement that commits when the test calls commit(); a client drains the answer. */
  async function committing(upstream: ReadableStream<Uint8Array>) {
    const c = { ended: false, text: '', closed: false, commit: () => {}, drained: Promise.resolve() };
    const res = await relayStream(input(upstream, () => { c.ended = true; return new Promise<void>((ok) => { c.commit = ok; }); }));
    const body = res.body!.getReader();
    c.drained = (async () => {
      for (let r = await body.read(); !r.done; r = await body.read()) c.text += new TextDecoder().decode(r.value);
      c.closed = true;
    })();
    return c;
  }

  test('a streamed answer: the client sees the end of the stream only after the promise onEnd returned has resolved', async () => {
    let finish!: () => void;
    const upstream = new ReadableStream<Uint8Array>({
      async start(c) {
        c.enqueue(DELTA);
        // The rest arrives later, so the answer is streamed rather than sent whole.
        await new Promise<void>((ok) => { finish = ok; });
        c.enqueue(frame('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 3 } }));
        c.enqueue(frame('message_stop'));
        c.close();
      },
    });
    const client = await committing(upstream);
    await Bun.sleep(20);
    expect(client.ended).toBe(false);
    finish();
    for (let i = 0; i < 50 && !client.ended; i++) await Bun.sleep(5);
    expect(client.ended).toBe(true);
    await Bun.sleep(50);
    // All but the last byte went out: the last event is not terminated, so no SSE parser has dispatched it.
    expect(client.text).toContain('"type":"message_stop"');
    expect(client.text.endsWith('}\n')).toBe(true);
    expect(client.closed).toBe(false);
    client.commit();
    await client.drained;
    expect(client.closed).toBe(true);
    expect(client.text.endsWith('"type":"message_stop"}\n\n')).toBe(true);
  });

  test('an answer the upstream sent whole: the client gets all but its last byte at once, and the end only after the commit', async () => {
    const upstream = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(DELTA);
        c.enqueue(frame('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 3 } }));
        c.enqueue(frame('message_stop'));
        c.close();
      },
    });
    // Sent as one held body or streamed, depending on how much of the turn is left: either way the
    // response is handed out before the commit and nothing ends before it.
    const client = await committing(upstream);
    for (let i = 0; i < 50 && !client.ended; i++) await Bun.sleep(5);
    expect(client.ended).toBe(true);
    await Bun.sleep(50);
    expect(client.closed).toBe(false);
    expect(client.text).toContain('"type":"message_stop"');
    expect(client.text.endsWith('}\n')).toBe(true);
    client.commit();
    await client.drained;
    expect(client.closed).toBe(true);
    expect(client.text.endsWith('"type":"message_stop"}\n\n')).toBe(true);
  });

  test('message_stop arrives and the upstream closes later: the end waits for the close and the commit', async () => {
    let close!: () => void;
    const upstream = new ReadableStream<Uint8Array>({
      async start(c) {
        await Bun.sleep(10);
        c.enqueue(frame('message_stop'));
        await new Promise<void>((ok) => { close = ok; });
        c.close();
      },
    });
    const client = await committing(upstream);
    await Bun.sleep(50);
    expect(client.text).toContain('"type":"message_stop"');
    expect(client.text.endsWith('}\n')).toBe(true);
    expect(client.ended).toBe(false);
    close();
    for (let i = 0; i < 50 && !client.ended; i++) await Bun.sleep(5);
    expect(client.ended).toBe(true);
    await Bun.sleep(20);
    expect(client.text.endsWith('}\n')).toBe(true);
    expect(client.closed).toBe(false);
    client.commit();
    await client.drained;
    expect(client.text.endsWith('"type":"message_stop"}\n\n')).toBe(true);
  });

  test('without holdEnd (a journaled settlement) message_stop goes out whole at once', async () => {
    const upstream = new ReadableStream<Uint8Array>({
      async start(c) {
        await Bun.sleep(10);
        c.enqueue(frame('message_stop'));
        await Bun.sleep(5000);
        c.close();
      },
    });
    const res = await relayStream({ ...input(upstream, () => Promise.resolve()), holdEnd: false });
    const body = res.body!.getReader();
    let text = '';
    const t0 = performance.now();
    while (!text.endsWith('"type":"message_stop"}\n\n') && performance.now() - t0 < 1000) text += new TextDecoder().decode((await body.read()).value);
    expect(text.endsWith('"type":"message_stop"}\n\n')).toBe(true);
    await body.cancel();
  });

  test('a failed commit still ends the answer (the request was served; the failure is logged, not thrown at the client)', async () => {
    const upstream = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(DELTA);
        c.enqueue(frame('message_stop'));
        c.close();
      },
    });
    const res = await relayStream(input(upstream, () => Promise.reject(new Error('commit failed'))));
    const text = await res.text();
    expect(text.endsWith('"type":"message_stop"}\n\n')).toBe(true);
  });
});

describe('checkpoints of a running stream', () => {
  test('every checkpointMs while output flows, none while the upstream is silent, none once the stream ended', async () => {
    const t0 = performance.now();
    // Deltas every 20 ms for 6 pulls, then 500 ms of silence, then two more and the end.
    let pulls = 0;
    let silentFrom = 0;
    const reader = new ReadableStream<Uint8Array>({
      async pull(c) {
        pulls++;
        if (pulls === 7) {
          silentFrom = performance.now() - t0;
          await Bun.sleep(500);
        }
        else await Bun.sleep(20);
        if (pulls <= 8) c.enqueue(DELTA);
        else c.enqueue(concatBytes([frame('content_block_stop', { index: 0 }), frame('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 9 } }), frame('message_stop')])!);
        if (pulls > 8) c.close();
      },
    }, { highWaterMark: 0 }).getReader() as unknown as ReadableStreamDefaultReader<Uint8Array>;
    const checkpoints: Array<{ at: number; end: StreamEnd }> = [];
    const ends: StreamEnd[] = [];
    const res = await relayStream({
      reader, first: START, decoder: anthropicAdapter.createStreamDecoder({ requestedModel: 'x' }), requestId: 'r', startedAt: t0,
      idleMs: 5000, stallMs: 5000, bufferBytes: 1024, onEnd: (e) => { ends.push(e); },
      checkpointMs: 60, onCheckpoint: (end) => { checkpoints.push({ at: performance.now() - t0, end }); },
    });
    await res.arrayBuffer();
    const endedAt = performance.now() - t0;
    await Bun.sleep(200);
    expect(ends).toHaveLength(1);
    // Output flowed for about 120 ms (6 × 20), then 500 ms of silence: checkpoints before it, none during it (past
    // the one that saw its last delta), and none after the end.
    expect(checkpoints.length).toBeGreaterThanOrEqual(1);
    expect(checkpoints.length).toBeLessThanOrEqual(5);
    expect(checkpoints.every((c) => c.at < endedAt)).toBe(true);
    const silent = checkpoints.filter((c) => c.at > silentFrom + 150 && c.at < silentFrom + 450);
    expect(silent).toEqual([]);
    for (const c of checkpoints) expect(c.end).toMatchObject({ errorCode: 'gateway_crashed', upstreamFault: false, reported: false });
    // What the last checkpoint saw delivered grows with the stream.
    const outputs = checkpoints.map((c) => c.end.usage.output_tokens);
    expect([...outputs].sort((a, b) => a - b)).toEqual(outputs);
  });
});
