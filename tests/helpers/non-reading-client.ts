import { expect } from 'bun:test';
import net from 'node:net';

/**
 * A raw /v1/realtime client that reads the handshake, then nothing more (its socket paused), as a hostile one may.
 * Connect it to a node itself: the cluster harness's proxy reads the node without bound, so the node would see no
 * backpressure through it.
 */
export async function nonReadingRealtimeClient(nodeUrl: string, key: string): Promise<net.Socket> {
  const u = new URL(nodeUrl);
  const s = net.connect(Number(u.port), u.hostname);
  await new Promise<void>((resolve, reject) => {
    let head = '';
    s.on('error', reject);
    s.on('data', (d) => {
      head += d.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      s.pause();
      s.removeAllListeners('data');
      expect(head).toStartWith('HTTP/1.1 101');
      resolve();
    });
    s.write(`GET /v1/realtime?model=gpt-realtime HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer ${key}\r\n\r\n`);
  });
  return s;
}
