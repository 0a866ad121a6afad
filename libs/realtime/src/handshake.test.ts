import { describe, expect, test } from 'bun:test';
import { isWebSocketRequest, offeredProtocols, readCredentials } from './handshake';

const h = (o: Record<string, string>) => new Headers(o);

describe('readCredentials', () => {
  test('Bearer header wins; offered "realtime" is answered', () => {
    expect(readCredentials(h({ authorization: 'Bearer sk-a', 'sec-websocket-protocol': 'realtime' }))).toEqual({ key: 'sk-a', via: 'header', answerProtocol: 'realtime' });
    expect(readCredentials(h({ authorization: 'bearer   sk-b  ' })).key).toBe('sk-b');
    expect(readCredentials(h({ authorization: 'Bearer sk-a' })).answerProtocol).toBeNull();
  });

  test('browser subprotocol key: answered "realtime", never the key protocol', () => {
    const c = readCredentials(h({ 'sec-websocket-protocol': 'realtime, openai-insecure-api-key.sk-x, openai-beta.realtime-v1' }));
    expect(c).toEqual({ key: 'sk-x', via: 'subprotocol', answerProtocol: 'realtime' });
    // Even when only the key protocol is offered, the key is not what the server answers.
    expect(readCredentials(h({ 'sec-websocket-protocol': 'openai-insecure-api-key.sk-x' })).answerProtocol).toBe('realtime');
  });

  test('a header key with other protocols offered answers the first one (never a key protocol)', () => {
    expect(readCredentials(h({ authorization: 'Bearer sk-a', 'sec-websocket-protocol': 'chat, v2' }))).toEqual({ key: 'sk-a', via: 'header', answerProtocol: 'chat' });
    expect(readCredentials(h({ authorization: 'Bearer sk-a', 'sec-websocket-protocol': 'openai-insecure-api-key.sk-other' })).answerProtocol).toBe('realtime');
  });

  test('no key', () => {
    expect(readCredentials(h({}))).toEqual({ key: '', via: 'none', answerProtocol: null });
    expect(readCredentials(h({ authorization: 'Basic abc' })).key).toBe('');
  });

  test('offeredProtocols splits and trims', () => {
    expect(offeredProtocols(' a ,b,, c ')).toEqual(['a', 'b', 'c']);
    expect(offeredProtocols(null)).toEqual([]);
  });
});

describe('isWebSocketRequest', () => {
  const up = { connection: 'keep-alive, Upgrade', upgrade: 'WebSocket', 'sec-websocket-key': 'x' };
  test('needs GET, Upgrade: websocket, Connection: upgrade and a key', () => {
    expect(isWebSocketRequest(new Request('http://h/v1/realtime', { headers: up }))).toBe(true);
    expect(isWebSocketRequest(new Request('http://h/v1/realtime'))).toBe(false);
    expect(isWebSocketRequest(new Request('http://h/v1/realtime', { headers: { ...up, connection: 'keep-alive' } }))).toBe(false);
    expect(isWebSocketRequest(new Request('http://h/v1/realtime', { headers: { connection: 'upgrade', upgrade: 'websocket' } }))).toBe(false);
    expect(isWebSocketRequest(new Request('http://h/v1/realtime', { method: 'POST', headers: up }))).toBe(false);
  });
});
