import { describe, expect, test } from 'bun:test';
import { PASS_MIN_BYTES, hasAsciiEscape, passMessageBytes } from './json-pass';
import { anthropicAdapter } from './adapter';

const enc = (v: unknown) => new TextEncoder().encode(typeof v === 'string' ? v : JSON.stringify(v));
const dec = (b: Uint8Array) => new TextDecoder().decode(b);
const usage = { input_tokens: 12, cache_creation_input_tokens: 3, cache_read_input_tokens: 4, output_tokens: 7, service_tier: 'standard', cache_creation: { ephemeral_5m_input_tokens: 1, ephemeral_1h_input_tokens: 2 } };
const message = (over: Record<string, unknown> = {}) => ({
  id: 'msg_1', type: 'message', role: 'assistant', model: 'up-model',
  content: [{ type: 'text', text: 'the "usage": {"input_tokens": 999999} inside text' }, { type: 'tool_use', id: 't', name: 'x', input: { counts: { input_tokens: 5 } } }],
  stop_reason: 'end_turn', stop_sequence: null, usage, ...over,
});

describe('native JSON answers pass through as bytes', () => {
  test('same model: the very bytes, usage read from the tail (not from look-alikes in the content)', () => {
    const bytes = enc(message({ model: 'alias' }));
    const p = passMessageBytes(bytes, 'alias', 0)!;
    expect(p.body).toBe(bytes);
    expect(p.usage).toEqual(usage as any);
  });

  test('a mapped model is replaced in place; the result decodes to what the full decoder produces', () => {
    const m = message();
    const p = passMessageBytes(enc(m), 'client "alias" é', 0)!;
    const full = anthropicAdapter.decodeMessagesResponse(structuredClone(m), { requestedModel: 'client "alias" é' });
    expect(JSON.parse(dec(p.body))).toEqual(JSON.parse(JSON.stringify(full.message)));
    // The counts billing reads are the same; the pass-through keeps the upstream's extra usage fields as sent.
    expect(p.usage).toMatchObject(full.usage as any);
  });

  test('escaped quotes and backslashes in head strings are skipped correctly', () => {
    const m = message({ id: 'msg_"q\\', model: 'up\\"m\\' });
    const same = passMessageBytes(enc(m), 'up\\"m\\', 0)!;
    expect(dec(same.body)).toBe(JSON.stringify(m));
    const other = passMessageBytes(enc(m), 'alias', 0)!;
    expect(JSON.parse(dec(other.body))).toEqual({ ...m, model: 'alias' });
  });

  test('short answers are decoded (cheaper that way); from PASS_MIN_BYTES on they pass', () => {
    const short = enc(message());
    expect(short.byteLength).toBeLessThan(PASS_MIN_BYTES);
    expect(passMessageBytes(short, 'up-model')).toBeNull();
    const long = enc(message({ content: [{ type: 'text', text: 'x'.repeat(PASS_MIN_BYTES) }] }));
    expect(passMessageBytes(long, 'up-model')?.body).toBe(long);
  });

  test('pretty-printed bodies and whitespace around the tail are fine', () => {
    const p = passMessageBytes(enc(`${JSON.stringify(message(), null, 2)}\n  `), 'up-model', 0);
    expect(p?.usage.output_tokens).toBe(7);
  });

  test.each([
    ['not an object', '[1]'],
    ['not a message', JSON.stringify(message({ type: 'error' }))],
    ['no model', JSON.stringify((({ model: _m, ...rest }) => rest)(message()))],
    ['usage not last', JSON.stringify({ ...message(), extra: 1 })],
    ['usage missing', JSON.stringify((({ usage: _u, ...rest }) => rest)(message()))],
    ['a count missing', JSON.stringify(message({ usage: { input_tokens: 1, output_tokens: 2 } }))],
    ['a count not an integer', JSON.stringify(message({ usage: { ...usage, output_tokens: 1.5 } }))],
    ['a count negative', JSON.stringify(message({ usage: { ...usage, input_tokens: -1 } }))],
    ['a null count', JSON.stringify(message({ usage: { ...usage, cache_read_input_tokens: null } }))],
    ['content not an array', JSON.stringify(message({ content: 'hi' }))],
    ['a number before content', JSON.stringify((({ id: _i, ...rest }) => ({ id: 'm', n: 1, ...rest }))(message()))],
    ['cut body', JSON.stringify(message()).slice(0, -1)],
    ['broken usage object', (() => { const t = JSON.stringify(message()); const i = t.lastIndexOf('"usage":{') + 9; return `${t.slice(0, i)},${t.slice(i)}`; })()],
    ['a key with escapes', `{"i\\"d":"x",${JSON.stringify(message()).slice(1)}`],
    ['empty', ''],
    // Duplicates some parsers read first-wins, others last-wins: decoded, so the client is sent one of each.
    ['usage twice', JSON.stringify(message()).replace('"stop_reason"', `"usage":${JSON.stringify({ ...usage, output_tokens: 900 })},"stop_reason"`)],
    ['a usage key inside content (conservatively)', JSON.stringify(message()).replace('"counts"', '"usage"')],
    ['model after content', JSON.stringify(message()).replace('"stop_reason"', '"model":"up-model","stop_reason"')],
    ['type twice in the head', JSON.stringify(message()).replace('"type":"message"', '"type":"error","type":"message"')],
    ['model twice in the head', JSON.stringify(message()).replace('"model":"up-model"', '"model":"a","model":"up-model"')],
    ['an escaped ASCII character (may spell a key)', JSON.stringify(message()).replace('"stop_reason"', '"mod\\u0065l":"up-model","stop_reason"')],
  ])('%s: decoded the slow way (null)', (_why, text) => {
    expect(passMessageBytes(enc(text), 'up-model', 0)).toBeNull();
  });
});

test('escapes that spell no key letter (control characters, Go\'s `\\u003c` `\\u003e` `\\u0026`) keep the bytes; a letter or `_` escape does not', () => {
  for (const e of ['\\u0000', '\\u001b', '\\u003c', '\\u003e', '\\u0026', '\\u0022', '\\u00e9']) {
    expect(hasAsciiEscape(Buffer.from(`"a${e}b"`))).toBe(false);
    const text = JSON.stringify(message()).replace('inside text', `inside ${e} text`);
    expect(passMessageBytes(enc(text), 'up-model', 0)?.body).toEqual(enc(text));
  }
  for (const e of ['\\u0040', '\\u0041', '\\u005f', '\\u005F', '\\u0065', '\\u007f']) expect(hasAsciiEscape(Buffer.from(`"a${e}b"`))).toBe(true);
});

test('to a request with a code-execution tool, an answer that may hold a call is decoded (calls are counted from the content), not passed as bytes', () => {
  const content = [{ type: 'server_tool_use', id: 's', name: 'bash_code_execution', input: { command: 'ls' } }, { type: 'text', text: 'x'.repeat(2000) }];
  expect(passMessageBytes(enc(message({ content })), 'alias', 0, true)).toBeNull();
  // A name spelled with an escape reads as code_execution once parsed.
  const escaped = JSON.stringify(message({ content })).replace('bash_code_execution', 'bash_code\\u005fexecution');
  expect(passMessageBytes(enc(escaped), 'alias', 0, true)).toBeNull();
  expect(passMessageBytes(enc(message()), 'alias', 0, true)).not.toBeNull();
  // Without the tool in the request nothing is counted (its bound is 0): the bytes pass, escapes of non-ASCII
  // characters included (an ASCII one may spell a key, so `\u005f` is decoded whatever the tools).
  const accented = JSON.stringify(message({ content })).replace('bash_code_execution', 'bash_code_\\u00e9');
  expect(passMessageBytes(enc(accented), 'alias', 0)?.body).toEqual(enc(accented.replace('"model":"up-model"', '"model":"alias"')));
  expect(passMessageBytes(enc(escaped), 'alias', 0)).toBeNull();
});
