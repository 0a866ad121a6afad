/**
 * HTTP over a raw TCP socket, for what `fetch` cannot express: a body that trickles or never ends,
 * malformed request lines, oversized headers, methods the client refuses to send.
 */

export interface RawExchange {
  /** Everything the server sent before closing (or before `waitMs`). */
  text: string;
  status: number;
  body: string;
  /** Milliseconds from connect until the first byte of the answer (NaN when none came). */
  firstByteMs: number;
  /** Whether the server closed the connection within `waitMs`. */
  closed: boolean;
}

/**
 * Sends `head` (and then `chunks`, one every `intervalMs`, until the answer starts or they run out) and
 * collects the answer until the server closes or `waitMs` passes.
 */
export function rawHttp(url: string, head: string, opts: { chunks?: string[]; intervalMs?: number; waitMs?: number; untilAnswered?: boolean } = {}): Promise<RawExchange> {
  const { hostname, port } = new URL(url);
  const started = performance.now();
  return new Promise((resolve, reject) => {
    let text = '';
    let firstByteMs = NaN;
    let done = false;
    let timer: ReturnType<typeof setInterval> | undefined;
    const finish = (closed: boolean, socket?: { end(): void }) => {
      if (done) return;
      done = true;
      clearInterval(timer);
      socket?.end();
      const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
      const sep = text.indexOf('\r\n\r\n');
      resolve({ text, status: m ? Number(m[1]) : 0, body: sep < 0 ? '' : text.slice(sep + 4), firstByteMs, closed });
    };
    // Bun's socket.write takes what the kernel accepts now and returns the count: the rest is queued here
    // and written on drain, so big bodies really arrive (or stop when the server stops reading).
    let queued = '';
    const flush = (s: { write(d: string): number }) => {
      while (queued) {
        const n = s.write(queued);
        if (n <= 0) return;
        queued = queued.slice(n);
      }
    };
    Bun.connect({
      hostname, port: Number(port),
      socket: {
        open(s) {
          queued = head;
          flush(s);
          const chunks = [...(opts.chunks ?? [])];
          if (chunks.length) timer = setInterval(() => {
            if (!chunks.length || text) return clearInterval(timer);
            if (queued.length > (1 << 20)) return; // the server is not reading: do not pile up more
            queued += chunks.shift()!;
            flush(s);
          }, opts.intervalMs ?? 50);
          setTimeout(() => finish(false, s), opts.waitMs ?? 2000);
        },
        drain(s) { flush(s); },
        data(s, d) {
          if (!text) firstByteMs = performance.now() - started;
          text += d.toString();
          if (opts.untilAnswered && complete(text)) finish(false, s);
        },
        close() { finish(true); },
        error() { finish(true); },
      },
    }).catch(reject);
  });
}

/** Whether `text` holds a whole answer with a Content-Length body. */
function complete(text: string): boolean {
  const sep = text.indexOf('\r\n\r\n');
  const m = /content-length: (\d+)/i.exec(text.slice(0, sep));
  return sep >= 0 && m !== null && text.length - sep - 4 >= Number(m[1]);
}

/** The JSON body of a raw answer (chunked or not), or null. */
export function rawJson(x: RawExchange): any {
  let b = x.body;
  if (/transfer-encoding: chunked/i.test(x.text)) {
    let out = '';
    for (let i = 0; ;) {
      const nl = b.indexOf('\r\n', i);
      const n = parseInt(b.slice(i, nl), 16);
      if (!n) break;
      out += b.slice(nl + 2, nl + 2 + n);
      i = nl + 2 + n + 2;
    }
    b = out;
  }
  try { return JSON.parse(b); } catch { return null; }
}
