/**
 * A complete answer whose last byte waits for its settlement to commit (PostgreSQL mode). Everything else
 * goes out at once, so the commit's round trip (a WAL flush) is not in the client's time to first byte;
 * yet the client cannot parse the JSON or see the stream's last event before the charge is durable, and a
 * node killed before the commit leaves the client a cut answer, never a complete one that was not billed.
 * Bun sends such a body chunked (it drops a Content-Length given for a stream).
 */
export function heldTail(body: Uint8Array | null, until: Promise<unknown>): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({ start: (c) => void endAfter(c, body, until) });
}

/**
 * Enqueues all of `body` but its last byte now, and that byte and the close once `until` settles (either
 * way: a failed commit is logged, the request was served). Resolves when the stream is closed.
 */
export function endAfter(c: ReadableStreamDefaultController<Uint8Array>, body: Uint8Array | null, until: Promise<unknown>): Promise<void> {
  const tail = holdLastByte(c, body);
  const finish = () => {
    try {
      if (tail) c.enqueue(tail);
      c.close();
    } catch { /* the client is gone: nothing to finish */ }
  };
  return until.then(finish, finish);
}

/** Enqueues all of `body` but its last byte, which it returns (null for an empty body). */
export function holdLastByte(c: ReadableStreamDefaultController<Uint8Array>, body: Uint8Array | null): Uint8Array | null {
  const n = body?.byteLength ?? 0;
  if (n > 1) c.enqueue(body!.subarray(0, n - 1));
  return n ? body!.subarray(n - 1) : null;
}
