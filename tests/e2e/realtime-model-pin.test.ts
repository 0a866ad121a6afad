/**
 * A realtime session keeps the model it was admitted with (the key's allow-list, the price and the holds were
 * judged on the handshake's ?model=): a client event naming another model is refused and never reaches the
 * upstream; one naming the admitted model goes on without the field, so the channel's mapping stays. A binary
 * client frame is read as the event a lenient upstream would take it for.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';
import { RESERVE, RESPONSE_CREATE, bearerOf, channel, open, wire, type Wiring } from '../helpers/realtime-wiring';

let g: Wiring;
let u: RealtimeUpstreamDouble;
beforeAll(async () => {
  u = startRealtimeUpstream();
  g = await wire({ REALTIME_MAX_SESSIONS_PER_KEY: '0' });
  g.channels.push(channel(1, u));
});
afterAll(async () => { await g.stop(); await u.stop(); });

const textOf = (d: string | Uint8Array) => (typeof d === 'string' ? d : Buffer.from(d).toString('utf8'));
const receivedBy = (conn: number) => u.received.filter((r) => r.conn === conn).map((r) => textOf(r.data as string | Uint8Array));
const rows = (userId: number) => g.h.sqlite.query("select model, upstream_model from usage_logs where user_id = ? and kind = 'realtime'").all(userId);

async function session(balance = 50_000_000) {
  const { key, userId } = await g.addKey(balance);
  const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key), g);
  await c.opened;
  await c.waitFor('session.created');
  return { c, userId, conn: u.connections.at(-1)!.id };
}

describe('realtime model pinning', () => {
  test('a session.update naming another model is refused (plain, escaped or binary); the session goes on, billed as admitted', async () => {
    const { c, userId, conn } = await session();
    c.ws.send(JSON.stringify({ type: 'session.update', session: { type: 'realtime', model: 'gpt-realtime-pro', instructions: 'x' } }));
    const err = await c.waitFor('error');
    expect(err.error).toMatchObject({ type: 'invalid_request_error', code: 'model_change_not_allowed' });
    expect(err.error.message).toContain('gpt-realtime-pro');
    c.ws.send('{"type":"session.update","session":{"mod\\u0065l":"gpt-realtime-pro"}}');
    c.ws.send(Buffer.from('{"type":"session.update","session":{"model":"gpt-realtime-pro"}}'));
    c.ws.send('{"type":"session.update","session":{"model":null}}');
    expect((await c.waitFor('error', 4)).error.code).toBe('model_change_not_allowed');
    c.ws.send(RESPONSE_CREATE);
    await c.waitFor('response.done');
    expect(c.close).toBeNull();
    expect(receivedBy(conn).filter((t) => t.includes('session.update') || t.includes('gpt-realtime-pro'))).toEqual([]);
    c.ws.close();
    await c.waitClose();
    await Bun.sleep(50);
    expect(rows(userId)).toEqual([{ model: 'gpt-realtime', upstream_model: 'gpt-realtime-2025' }]);
  });

  test('a session.update naming the admitted model reaches the upstream without it, the rest intact', async () => {
    const { c, conn } = await session();
    const update = { type: 'session.update', event_id: 'ev_1', session: { type: 'realtime', model: 'gpt-realtime', instructions: 'be brief', max_output_tokens: 10 } };
    c.ws.send(JSON.stringify(update));
    await u.until(() => receivedBy(conn).some((t) => t.includes('be brief')));
    const { model: _, ...rest } = update.session;
    expect(JSON.parse(receivedBy(conn).find((t) => t.includes('be brief'))!)).toEqual({ ...update, session: rest });
    expect(u.connections.at(-1)!.url).toContain('model=gpt-realtime-2025');
    expect(c.events().some((e) => e.type === 'error')).toBe(false);
    c.ws.close();
  });

  test('a response.create naming another model is refused with nothing held; naming the admitted one it is served', async () => {
    const { c, userId, conn } = await session();
    c.ws.send(JSON.stringify({ type: 'response.create', response: { model: 'gpt-realtime-pro', output_modalities: ['text'] } }));
    expect((await c.waitFor('error')).error.code).toBe('model_change_not_allowed');
    await Bun.sleep(30);
    expect(g.quota.available(userId)).toBe(g.quota.balance(userId));
    c.ws.send(JSON.stringify({ type: 'response.create', response: { model: 'gpt-realtime', output_modalities: ['text'] } }));
    await c.waitFor('response.done');
    expect(receivedBy(conn).filter((t) => t.includes('response.create')).map((t) => JSON.parse(t))).toEqual([
      // The gateway names a create that names itself nothing (an upstream error refusing it names that id).
      { event_id: expect.stringMatching(/^evt_gw_\w+$/), type: 'response.create', response: { output_modalities: ['text'] } },
    ]);
    c.ws.close();
  });

  test('a frame that spells its type twice (parsers keep the last) is read as the upstream reads it', async () => {
    const { c, userId, conn } = await session(RESERVE);
    c.ws.send('{"type":"input_audio_buffer.clear","type":"session.update","session":{"model":"gpt-realtime-pro"}}');
    expect((await c.waitFor('error')).error.code).toBe('model_change_not_allowed');
    c.ws.send('{"type":"input_audio_buffer.clear","typ\\u0065":"response.create","response":{"max_output_tokens":8192}}');
    expect((await c.waitFor('error', 2)).error.code).toBe('quota_exhausted');
    await Bun.sleep(50);
    expect(receivedBy(conn)).toEqual([]);
    expect(c.close).toBeNull();
    expect(g.quota.available(userId)).toBe(g.quota.balance(userId));
    c.ws.close();
  });

  // Go's encoding/json (and other lenient parsers) match keys case-insensitively and, for a key given twice, keep the
  // last, merging two objects into one: an upstream reading events that way must not see a model change, or a
  // create, the gateway read as something else.
  test('a frame a case-insensitive or merging parser reads as a model change or a create is refused or sent as the gateway read it', async () => {
    const { c, userId, conn } = await session(RESERVE);
    const ambiguous = [
      '{"type":"input_audio_buffer.clear","Type":"session.update","session":{"model":"gpt-realtime-pro"}}',
      '{"TYPE":"response.create","response":{"max_output_tokens":8192}}',
      '{"type":"session.update","Session":{"model":"gpt-realtime-pro"}}',
      '{"type":"response.create","Response":{"model":"gpt-realtime-pro"}}',
      '{"type":"response.create","response":{"MAX_OUTPUT_TOKENS":8192}}',
      '{"type":"response.create","response":{"Conversation":"none"}}',
    ];
    for (const f of ambiguous) c.ws.send(f);
    await c.waitFor('error', ambiguous.length);
    expect(c.events().filter((e) => e.type === 'error').map((e) => e.error.code)).toEqual(ambiguous.map(() => 'ambiguous_event'));
    // A session given twice: the gateway forwards the one it read (a merging parser would have taken the first's model).
    c.ws.send('{"type":"session.update","session":{"model":"gpt-realtime-pro"},"session":{"instructions":"dup"}}');
    await u.until(() => receivedBy(conn).some((t) => t.includes('"dup"')));
    await Bun.sleep(50);
    expect(receivedBy(conn)).toEqual(['{"type":"session.update","session":{"instructions":"dup"}}']);
    expect(c.close).toBeNull();
    expect(g.quota.available(userId)).toBe(g.quota.balance(userId));
    c.ws.close();
  });

  // Python's json.loads takes NaN, Infinity and -Infinity as numbers; JSON.parse refuses them, and the meter forwarded
  // a frame it could not parse unread: a model change or a create a Python upstream ran unmetered.
  test('a frame the meter must read that JSON.parse refuses (NaN, Infinity) is refused, not forwarded unread', async () => {
    const { c, userId, conn } = await session(RESERVE);
    const frames = [
      '{"type":"session.update","session":{"model":"gpt-realtime-pro","temperature":NaN}}',
      '{"type":"response.create","response":{"max_output_tokens":8192,"temperature":Infinity}}',
      '{"type":"input_audio_buffer.clear","type":"response.create","x":-Infinity}',
    ];
    for (const f of frames) c.ws.send(f);
    await c.waitFor('error', frames.length);
    expect(c.events().filter((e) => e.type === 'error').map((e) => e.error.code)).toEqual(frames.map(() => 'invalid_json'));
    await Bun.sleep(50);
    expect(receivedBy(conn)).toEqual([]);
    expect(c.close).toBeNull();
    expect(g.quota.available(userId)).toBe(g.quota.balance(userId));
    c.ws.close();
  });

  test('a metered event nested too deep to read is refused at once, the session kept and the gateway responsive', async () => {
    const { c, conn } = await session();
    const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);
    const t = performance.now();
    c.ws.send(`{"type":"response.create","response":{"model":${deep(40_000)}}}`);
    c.ws.send(`{"type":"session.update","session":{"model":"gpt-realtime","x":${deep(100_000)}}}`);
    c.ws.send(`{"type":"session.update","session":{"input_audio_transcription":{"model":${deep(40_000)}}}}`);
    expect((await c.waitFor('error', 3)).error.code).toBe('json_too_deep');
    expect(c.events().filter((e) => e.type === 'error').map((e) => e.error.code)).toEqual(['json_too_deep', 'json_too_deep', 'json_too_deep']);
    expect(performance.now() - t).toBeLessThan(1_000);
    c.ws.send(RESPONSE_CREATE);
    await c.waitFor('response.done');
    expect(c.close).toBeNull();
    expect(receivedBy(conn).filter((t) => t.includes('[['))).toEqual([]);
    c.ws.close();
  });

  test('any deep event with an escape (read for the cut-response bound) is refused, not a 1011; one with audio and none is relayed', async () => {
    const { c, conn } = await session();
    const deep = '['.repeat(100_000) + ']'.repeat(100_000);
    c.ws.send(`{"type":"conversation.item.create","item":{"x":"\\u0041","y":${deep}}}`);
    expect((await c.waitFor('error')).error.code).toBe('json_too_deep');
    // No second "type" and no escape: not a frame the meter parses, so it is relayed (the bound counts it whole as audio).
    c.ws.send(`{"type":"conversation.item.create","item":{"audio":"AAAA","y":${deep}}}`);
    await u.until(() => receivedBy(conn).some((t) => t.includes('"AAAA"')));
    c.ws.send(RESPONSE_CREATE);
    await c.waitFor('response.done');
    expect(c.close).toBeNull();
    c.ws.close();
  });

  // Python's json.loads(bytes) detects the encoding: a UTF-8 BOM is skipped, UTF-16 and UTF-32 are decoded. An upstream
  // reading binary frames that way took these for events the gateway relayed unread.
  test('a binary frame in UTF-16, UTF-32 or with a BOM is read as the event a lenient upstream decodes it to', async () => {
    const { c, userId, conn } = await session(RESERVE);
    const change = '{"type":"session.update","session":{"model":"gpt-realtime-pro"}}';
    const dear = '{"type":"response.create","response":{"max_output_tokens":8192}}';
    const utf16be = (t: string) => Buffer.from(t, 'utf16le').swap16();
    const utf32 = (t: string, le: boolean) => {
      const b = Buffer.alloc(t.length * 4);
      for (let i = 0; i < t.length; i++) le ? b.writeUInt32LE(t.charCodeAt(i), i * 4) : b.writeUInt32BE(t.charCodeAt(i), i * 4);
      return b;
    };
    const frames = [
      Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(change)]),
      Buffer.from(change, 'utf16le'),
      utf16be(`  ${change}`),
      Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(change, 'utf16le')]),
      utf32(change, true),
      utf32(`\n${change}`, false),
      Buffer.from(dear, 'utf16le'),
      utf32(dear, false),
    ];
    for (const f of frames) c.ws.send(f);
    await c.waitFor('error', frames.length);
    expect(c.events().filter((e) => e.type === 'error').map((e) => e.error.code)).toEqual([...Array(6).fill('model_change_not_allowed'), 'quota_exhausted', 'quota_exhausted']);
    // One within the balance is held, billed, and reaches the upstream as the gateway read it (UTF-8, its id first).
    u.binaryEvents = true;
    try {
      c.ws.send(Buffer.from(RESPONSE_CREATE, 'utf16le'));
      await c.waitFor('response.done');
    } finally {
      u.binaryEvents = false;
    }
    expect(receivedBy(conn).map((t) => JSON.parse(t))).toEqual([{ event_id: expect.stringMatching(/^evt_gw_\w+$/), ...JSON.parse(RESPONSE_CREATE) }]);
    c.ws.close();
    await c.waitClose();
    await Bun.sleep(50);
    expect(rows(userId)).toHaveLength(1);
  });

  test('a binary response.create is held like a text one: one the balance cannot cover never reaches a lenient upstream', async () => {
    u.binaryEvents = true;
    try {
      const { c, userId, conn } = await session(RESERVE);
      c.ws.send(Buffer.from('{"type":"response.create","response":{"max_output_tokens":8192}}'));
      expect((await c.waitFor('error')).error.code).toBe('quota_exhausted');
      await Bun.sleep(50);
      expect(receivedBy(conn).filter((t) => t.includes('response.create'))).toEqual([]);
      expect(c.close).toBeNull();
      // One within the balance is held, relayed as a binary frame (the bytes it was, named by the gateway: it had no
      // event_id), and billed.
      c.ws.send(Buffer.from(RESPONSE_CREATE));
      await c.waitFor('response.done');
      const sent = u.received.filter((r) => r.conn === conn && r.binary).map((r) => Buffer.from(r.data as Uint8Array).toString());
      const named = sent.length === 1 ? JSON.parse(sent[0]!).event_id : undefined;
      expect(named).toMatch(/^evt_gw_\w+$/);
      expect(sent).toEqual([`{"event_id":"${named}",${RESPONSE_CREATE.slice(1)}`]);
      c.ws.close();
      await c.waitClose();
      await Bun.sleep(50);
      expect(rows(userId)).toHaveLength(1);
    } finally {
      u.binaryEvents = false;
    }
  });
});
