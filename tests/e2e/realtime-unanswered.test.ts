/**
 * A response the upstream was asked for and never answered, through the whole gateway over real sockets: a
 * `response.create` forwarded upstream whose session ends before its `response.created` (the client closes, the
 * upstream drops) is billed once, like a cut response with nothing delivered: input on the conversation bound
 * (libs/realtime/src/context.ts), flagged `estimated`, the cause as its error code, request id
 * `<session>_unanswered_<n>`. Before, it billed nothing, and create+close could be repeated for free while the
 * provider charged for each. A create the gateway refused or never sent upstream bills nothing; so does one the
 * upstream refused with an error naming it. A commit the upstream's server VAD answers by itself is billed alike.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'bun:test';
import { costOf } from '@gw/core';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { RealtimeTestClient, startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';
import { availableOf } from './relay-setup';

const CTX = 16_000;
const PRICE = { model: 'gpt-realtime', input: 4_000_000, output: 16_000_000, cache_read: 400_000, cache_write: 0, audio_input: 32_000_000, audio_output: 64_000_000, context_window: CTX };
const OVERHEAD = 1024;
const CREATE = '{"type":"response.create"}';
const BALANCE = 10_000_000;

let gw: TestGateway;
let up: RealtimeUpstreamDouble;
const clients: RealtimeTestClient[] = [];

beforeAll(async () => {
  up = startRealtimeUpstream();
  gw = await startGateway({ REALTIME_DEFAULT_MODEL: 'gpt-realtime' });
  const ch = await gw.api('POST', '/api/channel/', { name: 'rt', type: 'openai', base_url: up.url, key: 'upstream-secret', timeout_ms: 5000, models: ['gpt-realtime'] });
  expect(ch.status).toBe(200);
  expect((await gw.api('PUT', '/api/pricing/', PRICE)).status).toBe(200);
}, 30_000);
afterEach(() => {
  up.stopBefore = null;
  up.echo = true;
  up.respondAfterMs = 0;
  up.handshakeDelayMs = 0;
  up.refuseWith = 0;
  up.rejectUnknown = false;
  up.refuseResponses = 0;
  up.echoEventIds = true;
});
afterAll(async () => {
  for (const c of clients) if (c.ws.readyState <= 1) c.ws.close();
  await gw.stop();
  await up.stop();
});

async function user(balance = BALANCE): Promise<{ id: number; key: string }> {
  const u = await makeUser(gw);
  await gw.services.ledger.apply({ userId: u.id, kind: 'topup', amount: balance, ref: `seed-${u.id}`, at: 1 });
  const r = await gw.api('POST', '/api/token/', { name: 'rt' }, u.token);
  expect(r.status).toBe(200);
  return { id: u.id, key: r.body.data.key };
}

function connect(key: string): RealtimeTestClient {
  const c = new RealtimeTestClient(`${gw.url.replace('http://', 'ws://')}/v1/realtime?model=gpt-realtime`, { headers: { authorization: `Bearer ${key}` } });
  clients.push(c);
  return c;
}

async function session(key: string): Promise<{ c: RealtimeTestClient; conn: number }> {
  const c = connect(key);
  await c.opened;
  await c.waitFor('session.created');
  return { c, conn: up.connections.at(-1)!.id };
}

/** The user's realtime rows once its `sessions` session records are written (after their last settlements). */
async function ended(userId: number, sessions = 1): Promise<any[]> {
  for (let i = 0; i < 250; i++) {
    const n = (await gw.db.get('select count(*) as n from realtime_sessions where user_id = ?', userId)) as any;
    if (Number(n?.n) >= sessions) break;
    await Bun.sleep(20);
  }
  return gw.db.all('select request_id, input_tokens, audio_input_tokens, output_tokens, audio_output_tokens, cost, usage_flag, error_code from usage_logs where user_id = ? order by id', userId);
}

/** Nothing stays held: what the user can reserve is its balance (behind the cluster harness: every node's view). */
async function noHolds(userId: number, balance: number): Promise<void> {
  for (let i = 0; i < 100 && (await availableOf(gw, userId)) !== balance; i++) await Bun.sleep(20);
  expect(await availableOf(gw, userId)).toBe(balance);
}

const creates = (conn: number) => up.received.filter((r) => r.conn === conn && String(r.data).includes('"response.create"')).length;
const sessionBytes = (c: RealtimeTestClient) => Buffer.byteLength(c.frames.find((f) => String(f).includes('"session.created"')) as string);
/** A create+close session's row: the conversation held the upstream's session, the create and the formatting; nothing was delivered. */
const unanswered = (c: RealtimeTestClient, cause: string, clientBytes = Buffer.byteLength(CREATE)) => {
  const input = OVERHEAD + sessionBytes(c) + clientBytes;
  return { request_id: expect.stringMatching(/^rt_\w+_unanswered_\d+$/), input_tokens: input, audio_input_tokens: 0, output_tokens: 0, audio_output_tokens: 0, cost: costOf([[input, PRICE.input]]), usage_flag: 'estimated', error_code: cause };
};

/** The session's one row is the unanswered create's, the ledger took exactly its cost, and nothing stays held. */
async function billedOnce(c: RealtimeTestClient, userId: number, cause: string, clientBytes?: number): Promise<void> {
  const rows = await ended(userId);
  const row = unanswered(c, cause, clientBytes);
  expect(rows).toEqual([row]);
  expect(await gw.services.ledger.sum(userId)).toBe(BALANCE - row.cost);
  await noHolds(userId, BALANCE - row.cost);
}

describe('a response.create forwarded upstream and never answered', () => {
  test('the client closes before response.created: one row on the conversation bound, the balance debited exactly that', async () => {
    up.stopBefore = 'response.created';
    const { id, key } = await user();
    const { c, conn } = await session(key);
    c.ws.send(CREATE);
    await up.until(() => creates(conn) === 1);
    c.ws.close(1000);
    await c.waitClose();
    const rows = await ended(id);
    const row = unanswered(c, 'client_closed');
    expect(rows).toEqual([row]);
    expect(row.input_tokens).toBeLessThan(CTX / 4);
    expect(row.cost).toBeGreaterThan(0);
    expect(await gw.services.ledger.sum(id)).toBe(BALANCE - row.cost);
    expect(await gw.db.get('select responses, cost from realtime_sessions where user_id = ?', id)).toEqual({ responses: 1, cost: row.cost });
    await noHolds(id, BALANCE - row.cost);
  }, 20_000);

  test('its response.created comes after the close: still billed once', async () => {
    up.respondAfterMs = 150;
    const late = up.lateAnswers;
    const { id, key } = await user();
    const { c, conn } = await session(key);
    c.ws.send(CREATE);
    await up.until(() => creates(conn) === 1);
    c.ws.close(1000);
    await c.waitClose();
    // The double answers on its (by then closed) connection.
    await up.until(() => up.lateAnswers === late + 1);
    await Bun.sleep(100);
    await billedOnce(c, id, 'client_closed');
  }, 20_000);

  test('the upstream drops before response.created: billed once, upstream_disconnected', async () => {
    up.stopBefore = 'response.created';
    const { id, key } = await user();
    const { c, conn } = await session(key);
    c.ws.send(CREATE);
    await up.until(() => creates(conn) === 1);
    for (const x of up.connections) if (x.id === conn) x.ws.terminate();
    expect((await c.waitClose()).code).toBe(1011);
    await billedOnce(c, id, 'upstream_disconnected');
  }, 20_000);

  test('create+close repeated 5 times bills 5 times, each on its own bound', async () => {
    up.stopBefore = 'response.created';
    const { id, key } = await user();
    const expected: any[] = [];
    for (let i = 0; i < 5; i++) {
      const { c, conn } = await session(key);
      c.ws.send(CREATE);
      await up.until(() => creates(conn) === 1);
      c.ws.close(1000);
      await c.waitClose();
      expected.push(unanswered(c, 'client_closed'));
    }
    const rows = await ended(id, 5);
    expect(rows).toEqual(expected);
    const total = expected.reduce((n, r) => n + r.cost, 0);
    expect(await gw.services.ledger.sum(id)).toBe(BALANCE - total);
    await noHolds(id, BALANCE - total);
  }, 30_000);

  test('two creates in the conversation, then the close: one billed (the upstream runs one at a time), no hold left', async () => {
    up.stopBefore = 'response.created';
    const { id, key } = await user();
    const { c, conn } = await session(key);
    c.ws.send(CREATE);
    c.ws.send(CREATE);
    await up.until(() => creates(conn) === 2);
    c.ws.close(1000);
    await c.waitClose();
    const rows = await ended(id);
    const row = unanswered(c, 'client_closed', 2 * Buffer.byteLength(CREATE));
    expect(rows).toEqual([row]);
    await noHolds(id, BALANCE - row.cost);
  }, 20_000);

  test('two out-of-band creates (conversation "none"), then the close: each may have run, both billed', async () => {
    up.stopBefore = 'response.created';
    const oob = '{"type":"response.create","response":{"conversation":"none","max_output_tokens":100}}';
    const { id, key } = await user();
    const { c, conn } = await session(key);
    c.ws.send(oob);
    c.ws.send(oob);
    await up.until(() => creates(conn) === 2);
    c.ws.close(1000);
    await c.waitClose();
    const rows = await ended(id);
    const first = unanswered(c, 'client_closed', 2 * Buffer.byteLength(oob));
    // The second reads the first's output too (it may have run unseen), at the dearer (audio) input price.
    const second = { ...first, audio_input_tokens: 100, cost: costOf([[first.input_tokens, PRICE.input], [100, PRICE.audio_input]]) };
    expect(rows).toEqual([first, second]);
    await noHolds(id, BALANCE - first.cost - second.cost);
  }, 20_000);

  // Before, an `error` naming no event gave back the oldest waiting create's hold: a create followed by a malformed
  // event (neither with an event_id) had the upstream's error about the malformed one taken for the create's
  // refusal, and closing before its response.created billed nothing while the upstream ran it.
  // Matching the client's own ids instead, a create and a malformed event sharing one fell the same way.
  const DUP_CREATE = '{"type":"response.create","event_id":"dup"}';
  for (const [what, create, after, about] of [
    ['a malformed event, neither naming an event_id', CREATE, '{"type":"bogus"}', null],
    ['a response.cancel, neither naming an event_id', CREATE, '{"type":"response.cancel"}', null],
    ['a malformed event with the same event_id', DUP_CREATE, '{"type":"bogus","event_id":"dup"}', 'dup'],
  ] as const) {
    test(`a create followed by ${what}: the upstream's error about the second frees nothing`, async () => {
      up.stopBefore = 'response.created';
      up.rejectUnknown = true;
      const { id, key } = await user();
      const { c, conn } = await session(key);
      c.ws.send(create);
      c.ws.send(after);
      const err = await c.waitFor('error');
      expect(err.error.event_id).toBe(about);
      expect(creates(conn)).toBe(1);
      c.ws.close(1000);
      await c.waitClose();
      await billedOnce(c, id, 'client_closed', Buffer.byteLength(create) + Buffer.byteLength(after));
    }, 20_000);
  }

  test('an answered response is billed as itself, never again as unanswered', async () => {
    up.stopBefore = 'response.done';
    const { id, key } = await user();
    const { c } = await session(key);
    c.ws.send(CREATE);
    await c.waitFor('response.output_text.done');
    c.ws.close(1000);
    await c.waitClose();
    const rows = await ended(id);
    expect(rows.map((r) => r.request_id)).toEqual([expect.stringMatching(/_resp_\d+$/)]);
  }, 20_000);
});

describe('a response.create that never reached the upstream, or was refused: nothing billed', () => {
  test('refused by the gateway (the balance cannot cover its hold): not forwarded, nothing billed', async () => {
    const { id, key } = await user();
    const { c, conn } = await session(key);
    // 10M output tokens at the audio output price: far beyond the balance (admission held the default 4,096).
    c.ws.send('{"type":"response.create","response":{"max_output_tokens":10000000}}');
    expect((await c.waitFor('error')).error.code).toBe('quota_exhausted');
    expect(creates(conn)).toBe(0);
    c.ws.close(1000);
    await c.waitClose();
    expect(await ended(id)).toEqual([]);
    expect(await gw.services.ledger.sum(id)).toBe(BALANCE);
    await noHolds(id, BALANCE);
  }, 20_000);

  test('refused by the upstream (an error naming it), then the close: nothing billed', async () => {
    up.stopBefore = 'response.created';
    const { id, key } = await user();
    const { c, conn } = await session(key);
    c.ws.send('{"type":"response.create","event_id":"evt_r"}');
    await up.until(() => creates(conn) === 1);
    // The upstream names the id the create reached it with; the client reads its own.
    const named = JSON.parse(String(up.received.filter((r) => r.conn === conn).at(-1)!.data)).event_id;
    up.send(JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', code: 'conversation_already_has_active_response', message: 'active', param: null, event_id: named } }), conn);
    expect((await c.waitFor('error')).error.event_id).toBe('evt_r');
    c.ws.close(1000);
    await c.waitClose();
    expect(await ended(id)).toEqual([]);
    await noHolds(id, BALANCE);
  }, 20_000);

  test('a create refused by the upstream: it reached it under an id of the gateway\'s, which the error names; the client reads its own; nothing billed', async () => {
    up.refuseResponses = 1;
    const { id, key } = await user();
    const { c, conn } = await session(key);
    c.ws.send(CREATE);
    const err = await c.waitFor('error');
    expect(err.error.code).toBe('conversation_already_has_active_response');
    // The client sent none: as from OpenAI, the error names none.
    expect(err.error.event_id).toBeNull();
    // The frame is the client's, the gateway's event_id written first.
    const sent = () => up.received.filter((r) => r.conn === conn).map((r) => String(r.data)).at(-1)!;
    expect(sent()).toMatch(new RegExp(`^\\{"event_id":"evt_gw_\\w+",${CREATE.slice(1).replace(/[{}.]/g, '\\$&')}$`));
    // A create with an event_id of its own reaches the upstream under the gateway's; the error is relayed naming the client's.
    up.refuseResponses = 1;
    c.ws.send('{"type":"response.create","event_id":"evt_mine"}');
    expect((await c.waitFor('error', 2)).error.event_id).toBe('evt_mine');
    expect(JSON.parse(sent())).toEqual({ type: 'response.create', event_id: expect.stringMatching(/^evt_gw_\w+$/) });
    c.ws.close(1000);
    await c.waitClose();
    expect(await ended(id)).toEqual([]);
    await noHolds(id, BALANCE);
  }, 20_000);

  test('a create whose event_id is huge (or an object): the gateway does not keep it, the refusal names none', async () => {
    // Before, the last 256 creates' ids were kept whatever their size: 256 creates with a 1 MB id held 256 MB per session.
    const { id, key } = await user();
    const { c } = await session(key);
    const ids = ['x'.repeat(1_000_000), { a: 'x'.repeat(1000) }, 'x'.repeat(257)];
    for (const [i, own] of ids.entries()) {
      up.refuseResponses = 1;
      c.ws.send(JSON.stringify({ type: 'response.create', event_id: own }));
      const err = await c.waitFor('error', i + 1);
      expect(err.error.code).toBe('conversation_already_has_active_response');
      expect(err.error.event_id).toBeNull();
    }
    // Up to 256 characters, a string id is named back as sent.
    up.refuseResponses = 1;
    c.ws.send(JSON.stringify({ type: 'response.create', event_id: 'y'.repeat(256) }));
    expect((await c.waitFor('error', ids.length + 1)).error.event_id).toBe('y'.repeat(256));
    c.ws.close(1000);
    await c.waitClose();
    expect(await ended(id)).toEqual([]);
    await noHolds(id, BALANCE);
  }, 20_000);

  test('sent while the upstream connects, which then refuses: never forwarded, nothing billed', async () => {
    up.handshakeDelayMs = 300;
    up.refuseWith = 503;
    const { id, key } = await user();
    const before = up.received.length;
    const c = connect(key);
    await c.opened;
    c.ws.send(CREATE);
    expect((await c.waitClose(5000)).code).toBe(1013);
    expect(up.received.length).toBe(before);
    expect(await ended(id)).toEqual([]);
    expect(await gw.services.ledger.sum(id)).toBe(BALANCE);
    await noHolds(id, BALANCE);
  }, 20_000);
});

describe('server VAD: a commit the upstream answers by itself', () => {
  const vad = (create_response: boolean) => JSON.stringify({ type: 'session.updated', session: { type: 'realtime', audio: { input: { turn_detection: { type: 'server_vad', create_response } } } } });
  const committed = '{"type":"input_audio_buffer.committed","item_id":"item_v1","previous_item_id":null}';
  /** The upstream's turn detection ends a turn: speech stopped, then its commit (OpenAI's order). */
  const stopped = '{"type":"input_audio_buffer.speech_stopped","audio_end_ms":1200,"item_id":"item_v1"}';

  test('committed, then the close before its response.created: billed once on the bound, unreserved', async () => {
    const { id, key } = await user();
    const { c, conn } = await session(key);
    up.send(vad(true), conn);
    up.send(stopped, conn);
    up.send(committed, conn);
    await c.waitFor('input_audio_buffer.committed');
    c.ws.close(1000);
    await c.waitClose();
    const rows = await ended(id);
    // The client sent nothing: the input is the largest session frame the upstream sent (its defaults) and the formatting.
    const bound = OVERHEAD + Math.max(sessionBytes(c), Buffer.byteLength(vad(true)));
    expect(rows).toEqual([{ ...unanswered(c, 'client_closed', 0), input_tokens: bound, cost: costOf([[bound, PRICE.input]]) }]);
    await noHolds(id, BALANCE - rows[0].cost);
  }, 20_000);

  test('its response.created whose hold is refused: the session ends (1008) and the response is billed all the same, unreserved', async () => {
    // Admission held the default 4,096 output tokens' worth; this response announces 100,000 (6.4M at the audio output price).
    const balance = 1_000_000;
    const { id, key } = await user(balance);
    const { c, conn } = await session(key);
    up.send(vad(true), conn);
    up.send(stopped, conn);
    up.send(committed, conn);
    up.send('{"type":"response.created","response":{"id":"resp_big","status":"in_progress","max_output_tokens":100000}}', conn);
    const closed = await c.waitClose();
    expect(closed.code).toBe(1008);
    expect(c.events().at(-1).error.code).toBe('quota_exhausted');
    const rows = await ended(id);
    // The upstream started it on its own turn detection and read the conversation: billed on the bound, as a cut
    // response (before, a refused hold meant no bill at all), within what the balance had left.
    const bound = OVERHEAD + Math.max(sessionBytes(c), Buffer.byteLength(vad(true)));
    const cost = costOf([[bound, PRICE.input]]);
    expect(cost).toBeLessThan(balance);
    expect(rows).toEqual([{ request_id: expect.stringMatching(/_resp_big$/), input_tokens: bound, audio_input_tokens: 0, output_tokens: 0, audio_output_tokens: 0, cost, usage_flag: 'estimated', error_code: 'quota_exhausted' }]);
    expect(await gw.services.ledger.sum(id)).toBe(balance - cost);
    await noHolds(id, balance - cost);
  }, 20_000);

  test('a create the upstream refuses while the VAD response runs on its hold: billed as that response only, the commit answered', async () => {
    up.stopBefore = 'response.created'; // the upstream is driven by hand: its turn detection answers the commit first
    const { id, key } = await user();
    const { c, conn } = await session(key);
    up.send(vad(true), conn);
    await c.waitFor('session.updated');
    c.ws.send(CREATE);
    await up.until(() => creates(conn) === 1);
    const named = JSON.parse(String(up.received.filter((r) => r.conn === conn).at(-1)!.data)).event_id;
    up.send(stopped, conn);
    up.send(committed, conn);
    up.send('{"type":"response.created","response":{"id":"resp_vad","status":"in_progress","max_output_tokens":"inf"}}', conn);
    up.send(JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', code: 'conversation_already_has_active_response', message: 'active', param: null, event_id: named } }), conn);
    const usage = { total_tokens: 130, input_tokens: 100, output_tokens: 30, input_token_details: { text_tokens: 100, audio_tokens: 0, image_tokens: 0, cached_tokens: 0 }, output_token_details: { text_tokens: 30, audio_tokens: 0 } };
    up.send(JSON.stringify({ type: 'response.done', response: { id: 'resp_vad', status: 'completed', usage } }), conn);
    await c.waitFor('response.done');
    c.ws.close(1000);
    await c.waitClose();
    // Before, the commit stayed pending (the response had taken the create's hold, as if answering it) and the close
    // billed it again as unanswered.
    const cost = costOf([[100, PRICE.input], [30, PRICE.output]]);
    expect((await ended(id)).map((r) => [r.request_id, r.cost])).toEqual([[expect.stringMatching(/^rt_\w+_resp_vad$/), cost]]);
    expect(await gw.services.ledger.sum(id)).toBe(BALANCE - cost);
    await noHolds(id, BALANCE - cost);
  }, 20_000);

  test('two sessions of one user (on different nodes behind the cluster harness) each ending on an unreserved whole-window charge: the balance never goes below zero', async () => {
    // Admission needs one response's worth (the window at the audio input price plus 4,096 output tokens: 774,144);
    // an image makes each cut request's input unknown, so each bills the whole window at the audio price (512,000).
    const balance = 800_000;
    const { id, key } = await user(balance);
    const image = JSON.stringify({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_image', image_url: 'data:image/png;base64,AAAA' }] } });
    const a = await session(key);
    const b = await session(key);
    for (const s of [a, b]) {
      s.c.ws.send(image);
      await s.c.waitFor('conversation.item.create');
      up.send(vad(true), s.conn);
      up.send(stopped, s.conn);
      up.send(committed, s.conn);
      await s.c.waitFor('input_audio_buffer.committed');
    }
    a.c.ws.close(1000);
    b.c.ws.close(1000);
    await Promise.all([a.c.waitClose(), b.c.waitClose()]);
    const rows = await ended(id, 2);
    const total = rows.reduce((n, r) => n + r.cost, 0);
    expect(rows.length).toBeGreaterThanOrEqual(1);
    expect(total).toBeLessThanOrEqual(balance);
    expect(await gw.services.ledger.sum(id)).toBe(balance - total);
    expect(await gw.services.ledger.sum(id)).toBeGreaterThanOrEqual(0);
  }, 20_000);

  test('a commit the client asked for under server VAD: it asks for no response (OpenAI), nothing billed', async () => {
    const { id, key } = await user();
    const { c, conn } = await session(key);
    up.send(vad(true), conn);
    await c.waitFor('session.updated');
    c.ws.send('{"type":"input_audio_buffer.commit"}');
    await up.until(() => up.received.some((r) => r.conn === conn && String(r.data).includes('input_audio_buffer.commit')));
    // No speech_stopped before it: not a turn the upstream's detection ended.
    up.send(committed, conn);
    await c.waitFor('input_audio_buffer.committed');
    c.ws.close(1000);
    await c.waitClose();
    // Before, any commit under server VAD was billed as a response asked for and never answered.
    expect(await ended(id)).toEqual([]);
    expect(await gw.services.ledger.sum(id)).toBe(BALANCE);
    await noHolds(id, BALANCE);
  }, 20_000);

  test('create_response false: a commit asks for no response, nothing billed', async () => {
    const { id, key } = await user();
    const { c, conn } = await session(key);
    up.send(vad(false), conn);
    up.send(stopped, conn);
    up.send(committed, conn);
    await c.waitFor('input_audio_buffer.committed');
    c.ws.close(1000);
    await c.waitClose();
    expect(await ended(id)).toEqual([]);
  }, 20_000);
});

// An upstream that leaves `event_id` out of its errors: only an error whose code only a response.create can get
// (`conversation_already_has_active_response`) refuses a create; any other unnamed error may be about another event.
describe('an upstream that does not echo event_id in its errors', () => {
  const vad = JSON.stringify({ type: 'session.updated', session: { type: 'realtime', audio: { input: { turn_detection: { type: 'server_vad', create_response: true } } } } });
  const stopped = '{"type":"input_audio_buffer.speech_stopped","audio_end_ms":1200,"item_id":"item_v1"}';
  const committed = '{"type":"input_audio_buffer.committed","item_id":"item_v1","previous_item_id":null}';
  const active = JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', code: 'conversation_already_has_active_response', message: 'active', param: null } });
  const usage = { total_tokens: 130, input_tokens: 100, output_tokens: 30, input_token_details: { text_tokens: 100, audio_tokens: 0, image_tokens: 0, cached_tokens: 0 }, output_token_details: { text_tokens: 30, audio_tokens: 0 } };
  const cost = costOf([[100, PRICE.input], [30, PRICE.output]]);

  test('a create it refuses (an active response, no event_id), then the close: nothing billed', async () => {
    // Before, the refused create's hold stayed held and the close billed it as unanswered.
    up.echoEventIds = false;
    up.refuseResponses = 1;
    const { id, key } = await user();
    const { c, conn } = await session(key);
    c.ws.send(CREATE);
    const err = await c.waitFor('error');
    expect(err.error.code).toBe('conversation_already_has_active_response');
    expect(err.error.event_id).toBeUndefined();
    expect(creates(conn)).toBe(1);
    c.ws.close(1000);
    await c.waitClose();
    expect(await ended(id)).toEqual([]);
    expect(await gw.services.ledger.sum(id)).toBe(BALANCE);
    await noHolds(id, BALANCE);
  }, 20_000);

  test('two creates, the second refused before the first\'s response.created: the response is billed, nothing as unanswered', async () => {
    up.stopBefore = 'response.created'; // driven by hand
    const { id, key } = await user();
    const { c, conn } = await session(key);
    c.ws.send(CREATE);
    c.ws.send(CREATE);
    await up.until(() => creates(conn) === 2);
    up.send(active, conn);
    up.send('{"type":"response.created","response":{"id":"resp_a","status":"in_progress","max_output_tokens":"inf"}}', conn);
    up.send(JSON.stringify({ type: 'response.done', response: { id: 'resp_a', status: 'completed', usage } }), conn);
    await c.waitFor('response.done');
    c.ws.close(1000);
    await c.waitClose();
    expect((await ended(id)).map((r) => [r.request_id, r.cost])).toEqual([[expect.stringMatching(/^rt_\w+_resp_a$/), cost]]);
    expect(await gw.services.ledger.sum(id)).toBe(BALANCE - cost);
    await noHolds(id, BALANCE - cost);
  }, 20_000);

  test('a create refused while the VAD response runs on its hold: billed as that response only, the commit answered', async () => {
    up.stopBefore = 'response.created';
    const { id, key } = await user();
    const { c, conn } = await session(key);
    up.send(vad, conn);
    await c.waitFor('session.updated');
    c.ws.send(CREATE);
    await up.until(() => creates(conn) === 1);
    up.send(stopped, conn);
    up.send(committed, conn);
    up.send('{"type":"response.created","response":{"id":"resp_vad","status":"in_progress","max_output_tokens":"inf"}}', conn);
    up.send(active, conn);
    up.send(JSON.stringify({ type: 'response.done', response: { id: 'resp_vad', status: 'completed', usage } }), conn);
    await c.waitFor('response.done');
    c.ws.close(1000);
    await c.waitClose();
    expect((await ended(id)).map((r) => [r.request_id, r.cost])).toEqual([[expect.stringMatching(/^rt_\w+_resp_vad$/), cost]]);
    expect(await gw.services.ledger.sum(id)).toBe(BALANCE - cost);
    await noHolds(id, BALANCE - cost);
  }, 20_000);

  // The upstream answers events in order: an unnamed refusal is about the oldest create it has not answered yet, never a
  // create sent after that one. A response whose start took an older create's hold may be its turn detection's.
  test('a VAD response on create 1\'s hold, create 2 sent, then create 1\'s unnamed refusal: create 2 ran, the close bills it reserved', async () => {
    up.stopBefore = 'response.created';
    const { id, key } = await user();
    const { c, conn } = await session(key);
    up.send(vad, conn);
    await c.waitFor('session.updated');
    c.ws.send(CREATE);
    await up.until(() => creates(conn) === 1);
    up.send(stopped, conn);
    up.send(committed, conn);
    up.send('{"type":"response.created","response":{"id":"resp_vad","status":"in_progress","max_output_tokens":"inf"}}', conn);
    await c.waitFor('response.created');
    c.ws.send(CREATE);
    await up.until(() => creates(conn) === 2);
    up.send(active, conn);
    up.send(JSON.stringify({ type: 'response.done', response: { id: 'resp_vad', status: 'completed', usage } }), conn);
    await c.waitFor('response.done');
    // Create 2 runs upstream (its response.created never reaches the gateway before the close): its hold stays held.
    // Before, the refusal gave it back (taken for the newest create's), and the create was billed at the close only
    // unreserved, on the pending commit's account, capped by whatever the user had not spent meanwhile elsewhere.
    expect(await availableOf(gw, id)).toBeLessThan(BALANCE - cost);
    c.ws.close(1000);
    await c.waitClose();
    const rows = await ended(id);
    expect(rows.map((r) => r.request_id)).toEqual([expect.stringMatching(/^rt_\w+_resp_vad$/), expect.stringMatching(/^rt_\w+_unanswered_\d+$/)]);
    expect(rows[0].cost).toBe(cost);
    expect(rows[1].cost).toBeGreaterThan(0);
    const total = rows[0].cost + rows[1].cost;
    expect(await gw.services.ledger.sum(id)).toBe(BALANCE - total);
    await noHolds(id, BALANCE - total);
  }, 20_000);

  test('the same race, then the next response.created: it runs on create 2\'s hold, billed as itself, nothing as unanswered', async () => {
    up.stopBefore = 'response.created';
    const { id, key } = await user();
    const { c, conn } = await session(key);
    up.send(vad, conn);
    await c.waitFor('session.updated');
    c.ws.send(CREATE);
    await up.until(() => creates(conn) === 1);
    up.send(stopped, conn);
    up.send(committed, conn);
    up.send('{"type":"response.created","response":{"id":"resp_vad","status":"in_progress","max_output_tokens":"inf"}}', conn);
    await c.waitFor('response.created');
    c.ws.send(CREATE);
    await up.until(() => creates(conn) === 2);
    up.send(active, conn);
    up.send(JSON.stringify({ type: 'response.done', response: { id: 'resp_vad', status: 'completed', usage } }), conn);
    const held = await (async () => { await c.waitFor('response.done'); return availableOf(gw, id); })();
    up.send('{"type":"response.created","response":{"id":"resp_2","status":"in_progress","max_output_tokens":"inf"}}', conn);
    up.send(JSON.stringify({ type: 'response.done', response: { id: 'resp_2', status: 'completed', usage } }), conn);
    await up.until(() => c.events().filter((e: any) => e.type === 'response.done').length === 2);
    // No second hold was taken for it: it ran on create 2's.
    expect(held).toBeLessThan(BALANCE - cost);
    c.ws.close(1000);
    await c.waitClose();
    expect((await ended(id)).map((r) => [r.request_id, r.cost])).toEqual([[expect.stringMatching(/_resp_vad$/), cost], [expect.stringMatching(/_resp_2$/), cost]]);
    expect(await gw.services.ledger.sum(id)).toBe(BALANCE - 2 * cost);
    await noHolds(id, BALANCE - 2 * cost);
  }, 20_000);

  // The other direction: an unnamed error about another event never frees a create the upstream runs, whichever side
  // of the create that event was sent on (the upstream reads them in order, so its error can come while the create waits).
  for (const [what, frames] of [
    ['a malformed event sent right after it', [CREATE, '{"type":"bogus"}']],
    ['a malformed event sent right before it', ['{"type":"bogus"}', CREATE]],
    ['a response.cancel with nothing running sent right after it', [CREATE, '{"type":"response.cancel"}']],
  ] as const) {
    test(`a create and ${what}: the unnamed error frees nothing, the create is billed as unanswered`, async () => {
      up.echoEventIds = false;
      up.rejectUnknown = true;
      up.stopBefore = 'response.created';
      const { id, key } = await user();
      const { c, conn } = await session(key);
      for (const f of frames) c.ws.send(f);
      const err = await c.waitFor('error');
      expect(err.error.event_id).toBeUndefined();
      expect(creates(conn)).toBe(1);
      c.ws.close(1000);
      await c.waitClose();
      await billedOnce(c, id, 'client_closed', frames.reduce((n, f) => n + Buffer.byteLength(f), 0));
    }, 20_000);
  }

  test('an unnamed error of another code (invalid_request_error) frees nothing, even with one create waiting and nothing sent since', async () => {
    up.stopBefore = 'response.created';
    const { id, key } = await user();
    const { c, conn } = await session(key);
    c.ws.send(CREATE);
    await up.until(() => creates(conn) === 1);
    up.send(JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', code: 'invalid_value', message: 'bad', param: 'type' } }), conn);
    await c.waitFor('error');
    c.ws.close(1000);
    await c.waitClose();
    await billedOnce(c, id, 'client_closed');
  }, 20_000);
});
