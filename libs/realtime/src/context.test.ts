import { describe, expect, test } from 'bun:test';
import { ConversationBound, SESSION_OVERHEAD_TOKENS, inputEstimate } from './context';

const audio = (pcm: number) => JSON.stringify({ type: 'input_audio_buffer.append', audio: Buffer.alloc(pcm).toString('base64') });

describe('ConversationBound', () => {
  test('an append is counted as audio by its frame length; any other frame by its UTF-8 bytes', () => {
    const b = new ConversationBound();
    const a = audio(48_000);
    b.client(a);
    b.client('{"type":"conversation.item.create","item":{"content":[{"type":"input_text","text":"héllo"}]}}');
    const c = b.bound(0);
    expect(c.audio).toBe(Math.ceil(((Math.floor((a.length * 3) / 4)) / 48_000) * 20));
    expect(c.text).toBe(SESSION_OVERHEAD_TOKENS + Buffer.byteLength('{"type":"conversation.item.create","item":{"content":[{"type":"input_text","text":"héllo"}]}}'));
    expect(c.known).toBe(true);
  });

  test('an append frame whose type a later key or an escape may change is counted as text, byte for byte (its audio string as audio)', () => {
    for (const f of [
      `{"type":"input_audio_buffer.append","audio":"AAAA","type":"conversation.item.create","item":{"content":[{"type":"input_text","text":"${'z'.repeat(9000)}"}]}}`,
      `{"type":"input_audio_buffer.append","audio":"AAAA","\\u0074ype":"conversation.item.create","text":"${'z'.repeat(9000)}"}`,
    ]) {
      const b = new ConversationBound();
      b.client(f);
      expect(b.bound(0)).toEqual({ text: SESSION_OVERHEAD_TOKENS + Buffer.byteLength(f) - 4, audio: 1, either: 0, known: true });
      expect(b.tailBytes).toBe(0);
    }
  });

  test('audio inside an item (GA, beta, a duplicate key) is counted as audio at the session rate, the rest of the frame as text', () => {
    const pcm = Buffer.alloc(48_000).toString('base64'); // one second of PCM16 at 24 kHz
    const item = (content: unknown[]) => JSON.stringify({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content } });
    for (const [f, b64] of [
      [item([{ type: 'input_audio', audio: pcm }]), pcm.length],
      [item([{ type: 'output_audio', audio: pcm, transcript: 'hi' }, { type: 'audio', audio: pcm }]), 2 * pcm.length],
      // A parser keeping the first of two keys reads the long one: both count.
      [`{"type":"conversation.item.create","item":{"content":[{"type":"input_audio","audio" : "${pcm}","audio":"AAAA"}]}}`, pcm.length + 4],
      // A string that merely mentions audio is text.
      [item([{ type: 'input_text', text: '"audio": "' + 'x'.repeat(5000) }]), 0],
    ] as const) {
      const b = new ConversationBound();
      b.client(f);
      expect(b.bound(0)).toEqual({ text: SESSION_OVERHEAD_TOKENS + Buffer.byteLength(f) - b64, audio: Math.ceil(((Math.floor((b64 * 3) / 4)) / 48_000) * 20), either: 0, known: true });
      expect(b.tailBytes).toBe(0);
    }
  });

  test('audio under an escaped key is counted as audio, and stays counted as text (an escape only overstates)', () => {
    const pcm = Buffer.alloc(48_000).toString('base64');
    const f = JSON.stringify({ type: 'response.create', response: { input: [{ type: 'message', role: 'user', content: [{ type: 'input_audio', audio: pcm }] }] } }).replace('"audio":', '"\\u0061udio":');
    const b = new ConversationBound();
    b.client(f);
    expect(b.bound(0)).toEqual({ text: SESSION_OVERHEAD_TOKENS + Buffer.byteLength(f), audio: 20, either: 0, known: true });
  });

  test('an append the fast path cannot take (type last) fills the buffer with its audio string, not its frame', () => {
    const b = new ConversationBound();
    b.client(JSON.stringify({ audio: 'AAAAAAAA', type: 'input_audio_buffer.append' }));
    expect(b.tailBytes).toBe(6);
    expect(b.bound(0).audio).toBe(1);
  });

  test('a frame nested past any reader\'s depth does not throw: an escaped one makes the bound unknown, one with audio is scanned, not parsed', () => {
    const deep = '['.repeat(200_000) + ']'.repeat(200_000);
    const b = new ConversationBound();
    const f = `{"type":"conversation.item.create","audio":"AAAA","x":${deep}}`;
    b.client(f);
    expect(b.bound(0)).toEqual({ text: SESSION_OVERHEAD_TOKENS + f.length - 4, audio: 1, either: 0, known: true });
    b.client(`{"type":"x","a":"\\u0041","b":${deep}}`);
    expect(b.bound(0).known).toBe(false);
  });

  test('G.711 named by a client update or the upstream makes every appended byte count at its rate', () => {
    const b = new ConversationBound();
    const a = audio(8_000);
    b.client(a);
    expect(b.bound(0).audio).toBe(Math.ceil((Math.floor((a.length * 3) / 4) / 48_000) * 20));
    b.session({ input_audio_format: 'g711_ulaw' });
    expect(b.bound(0).audio).toBe(Math.ceil((Math.floor((a.length * 3) / 4) / 8_000) * 20));
    b.session({ audio: { input: { format: { type: 'audio/pcm', rate: 24_000 } } } }, 100, true);
    expect(b.audioRate).toBe(8_000); // the densest format stays
  });

  test('an upstream session with a stored prompt or an MCP tool, or a client frame with an image, makes the bound unknown', () => {
    for (const f of [
      (b: ConversationBound) => b.session({ prompt: { id: 'pmpt_1' } }, 10, true),
      (b: ConversationBound) => b.session({ tools: [{ type: 'mcp', server_label: 's' }] }, 10, true),
      (b: ConversationBound) => b.client('{"type":"conversation.item.create","item":{"content":[{"type":"input\\u005fimage"}]}}'),
    ]) {
      const b = new ConversationBound();
      f(b);
      expect(b.bound(0).known).toBe(false);
    }
    const b = new ConversationBound();
    b.session({ prompt: null, tools: [{ type: 'function', name: 'f' }] }, 10, true);
    // A transcription prompt is text the frame carries; a stored prompt (an object), even escaped, is not.
    b.client('{"type":"session.update","session":{"audio":{"input":{"transcription":{"model":"m","prompt":"names: Zoë"}}}}}');
    expect(b.bound(0).known).toBe(true);
    b.client('{"type":"response.create","response":{"pro\\u006dpt":{"id":"pmpt_1"}}}');
    expect(b.bound(0).known).toBe(false);
  });

  test('earlier output is read back: as reported, an unusable count as the max output', () => {
    const b = new ConversationBound();
    b.output(10, 20, 4096);
    b.output(Number.NaN, 5, 100);
    b.output(10_000, 0, 100);
    expect(b.bound(7)).toEqual({ text: SESSION_OVERHEAD_TOKENS + 10 + 100 + 100, audio: 25, either: 7, known: true });
  });
});

describe('inputEstimate', () => {
  const P = { input: 4, audioInput: 32 };
  test('within the window the dearer kind (with what may be either) is filled first', () => {
    expect(inputEstimate({ text: 100, audio: 50, either: 10, known: true }, 1000, P)).toEqual({ input: 100, audioInput: 60 });
    expect(inputEstimate({ text: 5000, audio: 50, either: 10, known: true }, 1000, P)).toEqual({ input: 940, audioInput: 60 });
    expect(inputEstimate({ text: 100, audio: 5000, either: 0, known: true }, 1000, P)).toEqual({ input: 0, audioInput: 1000 });
    expect(inputEstimate({ text: 100, audio: 50, either: 10, known: true }, 1000, { input: 40, audioInput: 32 })).toEqual({ input: 110, audioInput: 50 });
  });
  test('an unknown bound is the whole window at the dearer price', () => {
    expect(inputEstimate({ text: 1, audio: 1, either: 0, known: false }, 1000, P)).toEqual({ input: 0, audioInput: 1000 });
    expect(inputEstimate({ text: 1, audio: 1, either: 0, known: false }, 1000, { input: 40, audioInput: 32 })).toEqual({ input: 1000, audioInput: 0 });
  });
});
