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

/** Subprotocols that select a protocol version (`openai-beta.realtime-v1`): passed on to the upstream. */
export const BETA_PROTOCOL_PREFIX = 'openai-beta.';

/** What a client sent to choose the (beta) protocol version; the upstream gets the same so its events match what the client expects. */
export interface RealtimeBeta {
  /** The `OpenAI-Beta` header (e.g. `realtime=v1`), or null. */
  header: string | null;
  /** Offered `openai-beta.*` subprotocols, in order. */
  protocols: string[];
}

/** Reads the client's protocol-version choice (never the key-bearing subprotocol). Bounded: one header, at most 8 protocols. */
export function readBeta(headers: Headers): RealtimeBeta {
  const header = headers.get('openai-beta')?.trim() || null;
  const protocols = offeredProtocols(headers.get('sec-websocket-protocol')).filter((p) => p.startsWith(BETA_PROTOCOL_PREFIX)).slice(0, 8);
  return { header: header && header.length <= 256 ? header : null, protocols };
}

/**
 * The upstream handshake for a client's beta choice: the header as sent, and its beta subprotocols after
 * `realtime` (the protocol an OpenAI-compatible server answers, so the handshake never fails for lack of one).
 */
export function upstreamBeta(beta: RealtimeBeta): { headers: Record<string, string>; protocols?: string[] } {
  return {
    headers: beta.header ? { 'openai-beta': beta.header } : {},
    ...(beta.protocols.length ? { protocols: ['realtime', ...beta.protocols] } : {}),
  };
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
