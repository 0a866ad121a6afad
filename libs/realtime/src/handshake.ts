/**
 * What the WebSocket handshake carries: the API key (header or browser subprotocol), the subprotocol
 * to answer with, and whether the request is an upgrade at all.
 */

/** Browser clients cannot set headers, so OpenAI's SDK sends the key as this subprotocol. */
export const KEY_PROTOCOL_PREFIX = 'openai-insecure-api-key.';

export interface HandshakeCredentials {
  /** The relay API key, or '' when none was sent. */
  key: string;
  /** Where it came from (decides the answered subprotocol). */
  via: 'header' | 'subprotocol' | 'none';
  /** Subprotocol to answer with, never a key-bearing one; null = send none. */
  answerProtocol: string | null;
}

/** Splits `Sec-WebSocket-Protocol` (comma separated, possibly repeated). */
export function offeredProtocols(header: string | null): string[] {
  if (!header) return [];
  return header.split(',').map((p) => p.trim()).filter(Boolean);
}

/**
 * Reads the key from `Authorization: Bearer` (preferred) or the `openai-insecure-api-key.<key>`
 * subprotocol, and picks the subprotocol to answer: `realtime` when a key came by subprotocol or
 * when offered, else the first offered non-key protocol. Bun echoes the first offered protocol when
 * none is chosen, which would leak the key, so a protocol is always chosen when any was offered.
 */
export function readCredentials(headers: Headers): HandshakeCredentials {
  const offered = offeredProtocols(headers.get('sec-websocket-protocol'));
  const keyProto = offered.find((p) => p.startsWith(KEY_PROTOCOL_PREFIX));
  const safe = offered.filter((p) => !p.startsWith(KEY_PROTOCOL_PREFIX));
  const answerProtocol = offered.length === 0 ? null : safe.includes('realtime') || keyProto ? 'realtime' : safe[0] ?? 'realtime';
  const authz = headers.get('authorization');
  if (authz) {
    const m = /^Bearer\s+(.+)$/i.exec(authz.trim());
    return { key: m?.[1]?.trim() ?? '', via: 'header', answerProtocol };
  }
  if (keyProto) return { key: keyProto.slice(KEY_PROTOCOL_PREFIX.length), via: 'subprotocol', answerProtocol };
  return { key: '', via: 'none', answerProtocol };
}

/** True when the request asks for a WebSocket upgrade (RFC 6455 §4.2.1), checked before upgrading. */
export function isWebSocketRequest(request: Request): boolean {
  if (request.method !== 'GET') return false;
  const upgrade = request.headers.get('upgrade');
  const connection = request.headers.get('connection') ?? '';
  return !!upgrade && upgrade.toLowerCase() === 'websocket'
    && /(^|,)\s*upgrade\s*(,|$)/i.test(connection)
    && !!request.headers.get('sec-websocket-key');
}
