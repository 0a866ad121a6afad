/**
 * A complete answer whose last byte waits for its settlement to commit (PostgreSQL mode). Everything else
 * goes out at once, so the commit's round trip (a WAL flush) is not in the client's time to first byte;
 * yet the client cannot parse the JSON or see the stream's last event before the charge is durable, and a
 * node killed before the commit leaves the client a cut answer, never a complete one that was not billed.
 * Bun sends such a body chunked (it drops a Content-Length given for a stream).
 */
export function heldTail(body: Uint8Array | null, until: Promise<unknown>): ReadableStream<Uint8Array> {
  const n = body?.byteLength ?? 0;
  return new ReadableStream<Uint8Array>({
    start(c) {
      if (n > 1) c.enqueue(body!.subarray(0, n - 1));
      const finish = () => {
        try {
          if (n > 0) c.enqueue(body!.subarray(n - 1));
          c.close();
        } catch { /* the client is gone: nothing to finish */ }
      };
      until.then(finish, finish);
    },
  });
}
