import { describe, expect, test } from 'bun:test';
import type { CountTokensRequest, MessagesRequest } from '@gw/formats';
import { anthropicAdapter as a, ANTHROPIC_VERSION } from './adapter';

const target = { baseUrl: 'https://api.example.com/', apiKey: 'sk-ant-k', upstreamModel: 'claude-real', extraHeaders: { 'x-extra': '1' } };
const body = { model: 'alias', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'text', text: 'hi', cache_control: { type: 'ephemeral' } }] }], future_field: { a: 1 } } as unknown as MessagesRequest;

const enc = new TextEncoder();
function streamOf(parts: string[], failAtEnd = false): ReadableStream<Uint8Array> {
  let i = 0;
  return new ReadableStream({
    pull(c) {
      if (i < parts.length) c.enqueue(enc.encode(parts[i++]!));
      else if (failAtEnd) c.error(new Error('socket closed'));
      else c.close();
    },
  });
}
const text = (s: ReadableStream<Uint8Array>) => new Response(s).text();

describe('anthropic adapter', () => {
  test('request: path joined once, only model replaced, unknown fields and cache_control kept, betas forwarded', () => {
    const { url, init } = a.buildMessagesRequest(body, target, new Headers([['anthropic-beta', 'a-1'], ['anthropic-beta', 'b-2'], ['authorization', 'Bearer client-key']]));
    expect(url).toBe('https://api.example.com/v1/messages');
    expect(init.headers).toEqual({ 'content-type': 'application/json', 'x-api-key': 'sk-ant-k', 'anthropic-version': ANTHROPIC_VERSION, 'anthropic-beta': 'a-1, b-2', 'x-extra': '1' });
    expect(JSON.parse(init.body)).toEqual({ ...body, model: 'claude-real' });
    expect(body.model).toBe('alias'); // not mutated
  });

  test('response: model echoed, usage normalized, extra usage fields kept', () => {
    const upstream = { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [{ type: 'text', text: 'x' }], stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 3, output_tokens: 1, cache_read_input_tokens: null, service_tier: 'standard' } };
    const { message, usage } = a.decodeMessagesResponse(upstream, { requestedModel: 'alias' });
    expect(message.model).toBe('alias');
    expect(usage).toEqual({ input_tokens: 3, output_tokens: 1, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 });
    expect(message.usage as unknown).toEqual({ input_tokens: 3, output_tokens: 1, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, service_tier: 'standard' });
    expect(() => a.decodeMessagesResponse({ error: 'x' }, { requestedModel: 'alias' })).toThrow(expect.objectContaining({ status: 502, code: 'upstream_bad_response' }));
  });

  test('count_tokens passes through; decode checks the number', () => {
    const { url, init } = a.buildCountTokensRequest!({ model: 'alias', messages: [{ role: 'user', content: 'x' }] } as CountTokensRequest, target, new Headers());
    expect(url).toBe('https://api.example.com/v1/messages/count_tokens');
    expect(JSON.parse(init.body).model).toBe('claude-real');
    expect(a.decodeCountTokens!({ input_tokens: 12 })).toBe(12);
    expect(() => a.decodeCountTokens!({})).toThrow();
  });

  test('stream: message_start model rewritten, other events byte-identical, usage from start + cumulative delta', async () => {
    const delta = 'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}\n\n';
    const parts = [
      'event: message_start\r\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-real","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":40,"output_tokens":1,"cache_read_input_tokens":900,"cache_creation_input_tokens":0}}}\r\n\r\n',
      'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\nevent: ping\ndata: {"type": "ping"}\n\n',
      delta.slice(0, 30), delta.slice(30),
      'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
      'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":57}}\n\n',
      'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    ];
    const d = a.createStreamDecoder({ requestedModel: 'alias' });
    const out = await text(d.pipe(streamOf(parts)));
    const start = out.slice(0, out.indexOf('\n\n'));
    expect(JSON.parse(start.split('data: ')[1]!).message.model).toBe('alias');
    expect(out.slice(out.indexOf('\n\n') + 2)).toBe(parts.slice(1).join('')); // the rest passes through unchanged
    expect(d.result()).toMatchObject({ usage: { input_tokens: 40, output_tokens: 57, cache_read_input_tokens: 900, cache_creation_input_tokens: 0 }, stopReason: 'end_turn', complete: true });
  });

  test('stream: an upstream error event is replaced by the gateway\'s own (known type kept, text never forwarded); a broken socket adds an error event', async () => {
    const err = 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded for key sk-ant-api03-SECRETSECRET"}}\n\n';
    const d1 = a.createStreamDecoder({ requestedModel: 'alias' });
    const out1 = await text(d1.pipe(streamOf([err, 'event: message_stop\ndata: {"type":"message_stop"}\n\n'])));
    expect(out1).toBe('event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"The upstream is overloaded; the answer was cut short."}}\n\n');
    expect(d1.result()).toMatchObject({ complete: false, usage: null });
    const d3 = a.createStreamDecoder({ requestedModel: 'alias' });
    const odd = await text(d3.pipe(streamOf(['event: error\ndata: {"type":"error","error":{"type":"weird</script>","message":"x"}}\n\n'])));
    expect(odd).toContain('"type":"api_error"');
    expect(odd).not.toContain('weird');

    const d2 = a.createStreamDecoder({ requestedModel: 'alias' });
    const out = await text(d2.pipe(streamOf(['event: ping\ndata: {"type":"ping"}\n\n'], true)));
    expect(out).toBe('event: ping\ndata: {"type":"ping"}\n\nevent: error\ndata: {"type":"error","error":{"type":"api_error","message":"The upstream connection failed mid-stream."}}\n\n');
    expect(d2.result().complete).toBe(false);
  });
});
