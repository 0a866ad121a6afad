/**
 * Closes a pool connection that has waited too long for any byte of an answer.
 *
 * A connection whose packets are silently dropped (a lost NAT or load-balancer entry, a failover that
 * neither resets nor closes) never fails by itself: postgres.js has no query timeout, TCP keepalive does
 * not probe while data is unacknowledged, and retransmissions give up only after about 15 minutes (or
 * never, when something on the way still acknowledges). Every query sent on it waits that long, and each
 * settlement batch that lands on it runs into its deadline. PostgreSQL ends every answer with ReadyForQuery,
 * so a socket that sent bytes after the last ReadyForQuery it received, and then saw nothing move either way
 * for `silenceMs`, is taken for dead and destroyed: postgres.js fails what was on it with CONNECTION_CLOSED (a
 * settlement retries it, recognising a write that did happen) and opens a new connection for what comes next.
 * (Bytes alone would not do: an answer cut before its ReadyForQuery leaves the last move a read.)
 *
 * Plain TCP only: on a TLS connection the counters of the socket underneath are not known to move in step,
 * so TLS pools are left as postgres.js makes them.
 */
import { connect, type Socket } from 'node:net';

interface Watched {
  socket: Socket;
  /** bytesWritten when the last ReadyForQuery arrived: written beyond it, the socket waits for an answer. */
  writtenAtReady: number;
  /** Last bytes received (a ReadyForQuery may be split across chunks). */
  tail: Buffer;
  /** Last time bytes moved either way (ms, performance.now()). */
  active: number;
  written: number;
}

/** PostgreSQL's ReadyForQuery: 'Z', length 5, then the transaction status (I, T or E). */
function endsReady(b: Buffer): boolean {
  const n = b.length;
  return n >= 6 && b[n - 6] === 0x5a && b[n - 5] === 0 && b[n - 4] === 0 && b[n - 3] === 0 && b[n - 2] === 5
    && (b[n - 1] === 0x49 || b[n - 1] === 0x54 || b[n - 1] === 0x45);
}

interface DriverOptions {
  host: string[];
  port: number[];
  path?: string | false;
}

export interface SilentSocketWatch {
  /** postgres.js's `socket` option (openPostgres leaves it out for TLS, keeping the driver's own sockets). */
  factory: (o: DriverOptions) => Socket;
  /** Starts judging (until then nothing is closed: migrations may run long statements). */
  arm(): void;
  stop(): void;
}

export function watchSilentSockets(silenceMs: number, tickMs = Math.min(1_000, Math.max(50, silenceMs / 4))): SilentSocketWatch {
  const live = new Set<Watched>();
  let armed = false;
  const timer = setInterval(() => {
    if (!armed) return;
    const now = performance.now();
    for (const w of live) {
      const written = w.socket.bytesWritten;
      if (written !== w.written) {
        w.written = written;
        w.active = now;
      }
      // Waiting: something was sent after the last ReadyForQuery (which ends every answer), and nothing moved since.
      if (written !== w.writtenAtReady && now - w.active > silenceMs) {
        live.delete(w);
        w.socket.destroy();
      }
    }
  }, tickMs);
  timer.unref();
  return {
    factory(o) {
      const socket = o.path ? connect(o.path) : connect(o.port[0]!, o.host[0]!);
      const w: Watched = { socket, writtenAtReady: 0, tail: Buffer.alloc(0), active: performance.now(), written: 0 };
      live.add(w);
      socket.on('data', (chunk: Buffer) => {
        w.active = performance.now();
        w.tail = chunk.length >= 6 ? chunk : Buffer.concat([w.tail, chunk]).subarray(-6);
        if (endsReady(w.tail)) w.writtenAtReady = socket.bytesWritten;
      });
      socket.once('close', () => live.delete(w));
      return socket;
    },
    arm() {
      // What moved before counts as moving now: a statement from before does not count as silent for that long.
      const now = performance.now();
      for (const w of live) w.active = Math.max(w.active, now);
      armed = true;
    },
    stop() { clearInterval(timer); },
  };
}
