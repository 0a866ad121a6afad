/**
 * Native Anthropic JSON answers go to the client as the upstream's bytes (only `model` replaced when the
 * channel maps it), billed from the usage at the body's tail; an answer of another shape is decoded and
 * re-serialised as before, and billed the same.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, send, setPrice, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let ant: Scripted;
let user: Awaited<ReturnType<typeof keyedUser>>;

beforeAll(async () => {
  gw = await startGateway();
  ant = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['alias', 'same'], mapping: { alias: 'up-model' } });
  await setPrice(gw, 'alias', { cache_write: 1_000_000 });
  await setPrice(gw, 'same');
  user = await keyedUser(gw, 100_000_000);
});
afterAll(async () => { await ant.stop(); await gw.stop(); });

const logOf = (id: string) => gw.db.get('select * from usage_logs where request_id = ?', id);
const json = (text: string) => () => new Response(text, { headers: { 'content-type': 'application/json' } });
// `\u00e9` stays an escape only if the bytes are forwarded; re-serialising would write `é`.
// Longer than PASS_MIN_BYTES: shorter answers are decoded, being as cheap that way.
const PAD = 'word '.repeat(240);
const CONTENT = `[{"type":"text","text":"caf\\u00e9 \\"usage\\":{\\"input_tokens\\":999} ${PAD}"}]`;
const USAGE = '{"input_tokens":11,"cache_creation_input_tokens":4,"cache_read_input_tokens":0,"output_tokens":7,"service_tier":"standard","cache_creation":{"ephemeral_5m_input_tokens":1,"ephemeral_1h_input_tokens":3}}';
const answer = (model: string, tail = '') =>
  `{"id":"msg_p","type":"message","role":"assistant","model":"${model}","content":${CONTENT},"stop_reason":"end_turn","stop_sequence":null,"usage":${USAGE}${tail}}`;

async function call(model: string) {
  const res = await fetch(`${gw.url}/v1/messages`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'vendor-version': '2023-06-01', 'x-api-key': user.key },
    body: JSON.stringify({ model, max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] }),
  });
  return { status: res.status, text: await res.text(), id: res.headers.get('request-id')!, type: res.headers.get('content-type') };
}

test('a mapped model: the upstream bytes with only the model replaced, billed from the tail usage (1-hour split included)', async () => {
  ant.queue.push({ response: json(answer('up-model')) });
  const r = await call('alias');
  expect(r.status).toBe(200);
  expect(r.type).toBe('application/json');
  expect(r.text).toBe(answer('alias'));
  expect(ant.last().body.model).toBe('up-model');
  const log = await logOf(r.id);
  expect([log.input_tokens, log.output_tokens, log.cache_write_tokens, log.cache_write_1h_tokens, log.usage_flag]).toEqual([11, 7, 4, 3, '']);
});

test('the same model: the very bytes', async () => {
  ant.queue.push({ response: json(answer('same')) });
  const r = await call('same');
  expect(r.text).toBe(answer('same'));
  expect((await logOf(r.id)).output_tokens).toBe(7);
});

test('escapes that spell no key (Go\'s `\\u003c` `\\u003e` `\\u0026`, control characters): the very bytes, billed as before', async () => {
  // A Go proxy (encoding/json) in front of Anthropic writes `<`, `>`, `&` so: such honest answers keep the fast path.
  const go = answer('up-model').replace('caf\\u00e9', 'caf\\u00e9 \\u003cb\\u003e \\u0026 \\u001b \\u0000');
  ant.queue.push({ response: json(go) });
  const r = await call('alias');
  expect(r.status).toBe(200);
  expect(r.text).toBe(go.replace('"model":"up-model"', '"model":"alias"'));
  expect(JSON.parse(r.text).content[0].text).toStartWith('café <b> & \u001b \u0000 ');
  const log = await logOf(r.id);
  expect([log.input_tokens, log.output_tokens, log.cache_write_tokens, log.cache_write_1h_tokens, log.usage_flag]).toEqual([11, 7, 4, 3, '']);
});

test('usage not at the tail: decoded and re-serialised as before, same billing', async () => {
  ant.queue.push({ response: json(answer('up-model', ',"extra":true')) });
  const r = await call('alias');
  expect(r.status).toBe(200);
  expect(r.text).not.toContain('\\u00e9');
  const body = JSON.parse(r.text);
  expect(body.model).toBe('alias');
  expect(body.content[0].text).toBe(`café "usage":{"input_tokens":999} ${PAD}`);
  expect(body.usage).toMatchObject({ input_tokens: 11, output_tokens: 7, cache_creation_input_tokens: 4 });
  const log = await logOf(r.id);
  expect([log.input_tokens, log.output_tokens, log.cache_write_tokens, log.cache_write_1h_tokens]).toEqual([11, 7, 4, 3]);
});

test('not a message (a 200 with an error object): fails as before, nothing billed', async () => {
  ant.queue.push({ response: json('{"type":"error","error":{"type":"api_error","message":"x"}}') });
  const r = await call('same');
  expect(r.status).toBe(502);
  expect(JSON.parse(r.text).error.code ?? JSON.parse(r.text).error.type).toBeTruthy();
  expect((await logOf(r.id))?.cost ?? 0).toBe(0);
});

/** A JSON body the upstream wrote by hand: `members` spliced in after `content` and before the tail usage. */
const rawAnswer = (members: string, usage = USAGE) =>
  `{"id":"msg_p","type":"message","role":"assistant","model":"up-model","content":${CONTENT},"stop_reason":"end_turn","stop_sequence":null${members},"usage":${usage}}`;

test('a second top-level `model` after content never shows the client the upstream model name', async () => {
  for (const members of [',"model":"up-model"', ',"mod\\u0065l":"up-model"']) {
    ant.queue.push({ response: json(rawAnswer(members)) });
    const r = await call('alias');
    expect(r.status).toBe(200);
    expect(JSON.parse(r.text).model).toBe('alias');
    expect(r.text).not.toContain('up-model');
    expect((await logOf(r.id)).output_tokens).toBe(7);
  }
});

test('`model` twice in the head: the client sees only its own model name', async () => {
  const body = answer('up-model').replace('"model":"up-model",', '"model":"up-model","model":"up-model",');
  ant.queue.push({ response: json(body) });
  const r = await call('alias');
  expect(r.text).not.toContain('up-model');
  expect(JSON.parse(r.text).model).toBe('alias');
});

test('`type` twice in the head: the client is sent one type (parsers disagree on which of two wins)', async () => {
  ant.queue.push({ response: json(answer('up-model').replace('"type":"message"', '"type":"error","type":"message"')) });
  const r = await call('alias');
  expect(r.status).toBe(200);
  expect(r.text).not.toContain('"type":"error"');
  expect(JSON.parse(r.text).type).toBe('message');
});

test('`usage` twice (or spelled with an escape): the client is sent exactly one usage, the one billed', async () => {
  const big = '{"input_tokens":900,"output_tokens":40,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}';
  for (const members of [`,"usage":${big}`, `,"us\\u0061ge":${big}`]) {
    ant.queue.push({ response: json(rawAnswer(members)) });
    const r = await call('alias');
    expect(r.status).toBe(200);
    expect(r.text.match(/"usage"/g)?.length).toBe(1);
    const shown = JSON.parse(r.text).usage;
    const log = await logOf(r.id);
    expect([log.input_tokens, log.output_tokens]).toEqual([shown.input_tokens, shown.output_tokens]);
  }
});
