/** Reads a body stream up to `limit` bytes; null once it is longer (the rest is cancelled, not buffered). */
export async function readCapped(stream: ReadableStream<Uint8Array> | null, limit: number): Promise<Uint8Array | null> {
  const r = await readBounded(stream, { limit, deadline: Infinity });
  return r.ok ? r.bytes : null;
}

export type BoundedRead = { ok: true; bytes: Uint8Array } | { ok: false; reason: 'too_large' | 'timeout' | 'aborted' };

/**
 * Reads a body stream with two bounds: at most `limit` bytes, and finished by `deadline`
 * (a `performance.now()` instant). A trickling sender is cut at the deadline however steadily it sends,
 * which a per-byte idle timer never does. On any failure the stream is cancelled, nothing more is buffered.
 */
export async function readBounded(stream: ReadableStream<Uint8Array> | null, opts: { limit: number; deadline: number }): Promise<BoundedRead> {
  if (!stream) return { ok: true, bytes: new Uint8Array(0) };
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = Number.isFinite(opts.deadline)
    ? new Promise<'timeout'>((resolve) => { timer = setTimeout(() => resolve('timeout'), Math.max(0, opts.deadline - performance.now())); })
    : null;
  const fail = (reason: 'too_large' | 'timeout' | 'aborted'): BoundedRead => {
    reader.cancel().catch(() => {});
    return { ok: false, reason };
  };
  try {
    for (;;) {
      const next = reader.read();
      const step = expired ? await Promise.race([next, expired]) : await next;
      if (step === 'timeout') return fail('timeout');
      if (step.done) break;
      size += step.value.byteLength;
      if (size > opts.limit) return fail('too_large');
      chunks.push(step.value);
    }
  } catch {
    // The client went away mid-body.
    return fail('aborted');
  } finally {
    clearTimeout(timer);
  }
  return { ok: true, bytes: chunks.length === 1 ? chunks[0]! : new Uint8Array(Buffer.concat(chunks)) };
}
