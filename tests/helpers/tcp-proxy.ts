/**
 * A loopback TCP proxy a test can cut: `down()` drops every connection through it and refuses new
 * ones (as a database restart or a network partition would) until `up()`; `blackhole()` silences
 * the open connections without closing them. The real server is never
 * touched, so other test files sharing it are unaffected.
 */
import type { Socket } from 'bun';

interface Pipe { client: Socket<Pipe>; server: Socket<Pipe> | null; toServer: Uint8Array[]; toClient: Uint8Array[]; dead: boolean; cutOnReply?: boolean }

export interface TcpProxy {
  port: number;
  /**
   * Every open connection silently stops carrying bytes (no FIN, no RST: a lost NAT entry), the server closing its
   * end included; new ones work.
   */
  blackhole(): void;
  down(): void;
  up(): void;
  /**
   * Once: the next client message containing `text` (ASCII, any case) still reaches the server, but the
   * server's reply to it is swallowed and the connection closed (a COMMIT that happened, unacknowledged).
   */
  dropReplyAfter(text: string): void;
  stop(): void;
}

/** `target` may be a function: called once per accepted connection (e.g. round-robin over several servers). */
export function tcpProxy(target: { host: string; port: number } | (() => { host: string; port: number })): TcpProxy {
  let refusing = false;
  let dropAfter: string | null = null;
  const pipes = new Set<Pipe>();
  const flush = (sock: Socket<Pipe>, queue: Uint8Array[]) => {
    while (queue.length) {
      const chunk = queue[0]!;
      const n = sock.write(chunk);
      if (n < chunk.length) {
        queue[0] = chunk.subarray(Math.max(0, n));
        return;
      }
      queue.shift();
    }
  };
  const close = (p: Pipe) => {
    pipes.delete(p);
    p.client.end();
    p.server?.end();
  };
  const handlers: Parameters<typeof Bun.listen<Pipe>>[0]['socket'] = {
      open(client) {
        if (refusing) return void client.end();
        const p: Pipe = { client, server: null, toServer: [], toClient: [], dead: false };
        client.data = p;
        pipes.add(p);
        const to = typeof target === 'function' ? target() : target;
        Bun.connect<Pipe>({
          hostname: to.host,
          port: to.port,
          data: p,
          socket: {
            open(server) {
              p.server = server;
              flush(server, p.toServer);
            },
            data(_server, chunk) {
              if (p.dead) return;
              if (p.cutOnReply) return void close(p);
              p.toClient.push(new Uint8Array(chunk));
              flush(p.client, p.toClient);
            },
            drain(server) { flush(server, p.toServer); },
            // Behind a lost NAT entry the server's FIN or RST never reaches the client either: the client end
            // stays open, silent, until the test stops the proxy.
            close() { if (p.dead) p.server = null; else close(p); },
            error() { if (p.dead) p.server = null; else close(p); },
          },
        }).catch(() => close(p));
      },
      data(_client, chunk) {
        const p = _client.data;
        if (p.dead) return;
        if (dropAfter && Buffer.from(chunk).toString('latin1').toLowerCase().includes(dropAfter)) {
          dropAfter = null;
          p.cutOnReply = true;
        }
        p.toServer.push(new Uint8Array(chunk));
        if (p.server) flush(p.server, p.toServer);
      },
      drain(client) { flush(client, client.data.toClient); },
      close(client) { if (client.data) close(client.data); },
      error(client) { if (client.data) close(client.data); },
  };
  let listener = Bun.listen<Pipe>({ hostname: '127.0.0.1', port: 0, socket: handlers });
  const port = listener.port;
  let listening = true;
  return {
    port,
    dropReplyAfter(text) {
      dropAfter = text.toLowerCase();
    },
    blackhole() {
      for (const p of pipes) p.dead = true;
    },
    down() {
      refusing = true;
      for (const p of [...pipes]) close(p);
      // Nothing listens on the port while down: connecting fails at once (ECONNREFUSED).
      listener.stop(true);
      listening = false;
    },
    up() {
      refusing = false;
      if (!listening) listener = Bun.listen<Pipe>({ hostname: '127.0.0.1', port, socket: handlers });
      listening = true;
    },
    stop() {
      refusing = true;
      for (const p of [...pipes]) close(p);
      if (listening) listener.stop(true);
      listening = false;
    },
  };
}
