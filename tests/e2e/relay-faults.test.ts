/**
 * Only the upstream's own failures count against a channel. Requests the gateway cannot build (a body that
 * overflows the stack, content the translator refuses) are the client's 400; clients that go away are
 * `client_closed`. Neither touches health nor fails over, however often it happens.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, nodeOne, send, setPrice, upstream, V, type Scripted } from './relay-setup';

let gw: TestGateway;
const ups: Scripted[] = [];
const up = (kind: 'anthropic' | 'openai' = 'anthropic') => { const u = upstream(kind); ups.push(u); return u; };
beforeAll(async () => {
  // Two failures disable a channel; the prober never runs, so hit counts are exact.
  gw = await startGateway({ RELAY_HEALTH_FAILURES: '2', RELAY_PROBE_INTERVAL_MS: '3600000', RELAY_MAX_ATTEMPTS: '3' });
});
afterAll(async () => { for (const u of ups) await u.stop(); await gw.stop(); });

const status = (id: number) => gw.services.channelRegistry.get(id)!.status;
/** The disable runs beside the response (probe, then write): wait for it rather than race it (PostgreSQL commits take longer). */
const statusSoon = async (id: number, want: number) => {
  for (let i = 0; i < 100 && status(id) !== want; i++) await Bun.sleep(20);
  return status(id);
};
const rowsOf = (userId: number) => gw.db.all('select status, error_code, output_tokens, cost from usage_logs where user_id = ? order by id', userId);

/** Three channels for `model` of `kind`, priorities 3, 2, 1. */
async function trio(model: string, kind: 'anthropic' | 'openai') {
  await setPrice(gw, model);
  const us = [up(kind), up(kind), up(kind)];
  const ids: number[] = [];
  for (const [i, u] of us.entries()) ids.push(await addChannel(gw, { type: kind, url: u.url, models: [model], priority: 3 - i }));
  return { us, ids, hits: () => us.map((u) => u.hits) };
}

/** A JSON value nested `depth` levels deep, as raw text (JSON.stringify of it would overflow here too). */
const deep = (depth: number) => '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);

describe('client faults never count against a channel', () => {
  test('a body that overflows the stack while the upstream request is built: 400, no health change, no failover', async () => {
    const { ids, hits } = await trio('cf-deep', 'anthropic');
    const u = await keyedUser(gw);
    for (let i = 0; i < 3; i++) {
      const raw = `{"model":"cf-deep","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"metadata":${deep(60_000)}}`;
      const r = await send(gw, u.key, raw);
      // The front door may refuse the depth first (also a 400); either way it is the client's error.
      expect(r.status).toBe(400);
      expect(r.body.error.type).toBe('invalid_request_error');
    }
    expect(ids.map(status)).toEqual([1, 1, 1]);
    expect(hits()).toEqual([0, 0, 0]);
    expect((await send(gw, u.key, msg('cf-deep'))).status).toBe(200);
  });

  test('content the OpenAI translator cannot express: 400 invalid_request_error, no health change, no failover', async () => {
    const { ids, hits } = await trio('cf-doc', 'openai');
    const u = await keyedUser(gw);
    const body = msg('cf-doc', { messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'content', content: 5 } }] }] });
    for (let i = 0; i < 3; i++) {
      const r = await send(gw, u.key, body);
      expect(r.status).toBe(400);
      expect(r.body.error.type).toBe('invalid_request_error');
    }
    expect(ids.map(status)).toEqual([1, 1, 1]);
    expect(hits()).toEqual([0, 0, 0]);
  });

  /** Starts a request and aborts it after `ms`; resolves when the client gave up. */
  async function abortAfter(key: string, body: unknown, ms: number, readFirst = false) {
    const ctl = new AbortController();
    const res = fetch(`${gw.url}/v1/messages`, { method: 'POST', signal: ctl.signal, headers: { 'content-type': 'application/json', 'x-api-key': key, ...V }, body: JSON.stringify(body) });
    if (readFirst) {
      const r = await res;
      const reader = r.body!.getReader();
      await reader.read();
      await Bun.sleep(ms);
      ctl.abort();
      await reader.read().catch(() => undefined);
      return;
    }
    setTimeout(() => ctl.abort(), ms);
    await res.then((r) => r.text()).catch(() => undefined);
  }

  const settle = async (u: { id: number }, n: number) => {
    for (let i = 0; i < 100 && (await rowsOf(u.id)).length < n; i++) await Bun.sleep(20);
    return (await rowsOf(u.id));
  };

  test('a client that closes before the upstream answered: client_closed, no health change, no failover', async () => {
    const { us, ids, hits } = await trio('cf-gone', 'anthropic');
    us[0]!.fallback = { delayMs: 400 };
    const u = await keyedUser(gw);
    for (let i = 0; i < 3; i++) await abortAfter(u.key, msg('cf-gone'), 100);
    const rows = await settle(u, 3);
    expect(rows.map((r) => r.error_code)).toEqual(['client_closed', 'client_closed', 'client_closed']);
    expect(rows.every((r) => r.cost === 0)).toBe(true);
    expect(ids.map(status)).toEqual([1, 1, 1]);
    expect(hits()).toEqual([3, 0, 0]);
  });

  test('a client that closes while a non-streaming body is being read: client_closed, no health change', async () => {
    const { us, ids, hits } = await trio('cf-body', 'anthropic');
    // Headers at once, then a body that takes 600 ms to arrive.
    us[0]!.fallback = {
      response: () => new Response(new ReadableStream({
        async pull(c) { c.enqueue(new TextEncoder().encode('{"id":"msg_1",')); await Bun.sleep(600); c.close(); },
      }), { headers: { 'content-type': 'application/json' } }),
    };
    const u = await keyedUser(gw);
    for (let i = 0; i < 3; i++) await abortAfter(u.key, msg('cf-body'), 150);
    const rows = await settle(u, 3);
    expect(rows.map((r) => r.error_code)).toEqual(['client_closed', 'client_closed', 'client_closed']);
    expect(ids.map(status)).toEqual([1, 1, 1]);
    expect(hits()).toEqual([3, 0, 0]);
  });

  test('a client that closes mid-stream: client_closed, billed for what was delivered, upstream cancelled, no health change', async () => {
    const { us, ids } = await trio('cf-mid', 'anthropic');
    us[0]!.fallback = { text: 'one two three four five six seven eight nine ten', chunkDelayMs: 80 };
    const u = await keyedUser(gw);
    for (let i = 0; i < 3; i++) await abortAfter(u.key, msg('cf-mid', { stream: true }), 250, true);
    const rows = await settle(u, 3);
    expect(rows.map((r) => r.error_code)).toEqual(['client_closed', 'client_closed', 'client_closed']);
    expect(rows.every((r) => r.status === 200 && r.output_tokens > 0 && r.cost > 0)).toBe(true);
    expect(ids.map(status)).toEqual([1, 1, 1]);
    for (let i = 0; i < 50 && us[0]!.double.cancelled < 3; i++) await Bun.sleep(20);
    expect(us[0]!.double.cancelled).toBe(3);
  });

  test('upstream faults still count: two 500s disable the channel', async () => {
    const { us, ids } = await trio('cf-real', 'anthropic');
    us[0]!.fallback = { error: { status: 500 } };
    const u = await keyedUser(gw);
    // Failure counts are per node: both to node 1.
    expect((await send(nodeOne(gw), u.key, msg('cf-real'))).status).toBe(200);
    expect((await send(nodeOne(gw), u.key, msg('cf-real'))).status).toBe(200);
    expect(await statusSoon(ids[0]!, 3)).toBe(3);
  });
});

describe('redirects', () => {
  test('a 3xx from a channel is not followed: the target never sees the key, the request fails over, the channel is charged a failure', async () => {
    const trap = up();
    const { us, ids, hits } = await trio('rd', 'anthropic');
    us[0]!.fallback = { response: () => new Response(null, { status: 307, headers: { location: `${trap.url}/v1/messages` } }) };
    const u = await keyedUser(gw);
    // Failure counts are per node: both to node 1.
    const r = await send(nodeOne(gw), u.key, msg('rd'));
    expect(r.status).toBe(200);
    expect(trap.hits).toBe(0);
    expect(hits()).toEqual([1, 1, 0]);
    expect((await send(nodeOne(gw), u.key, msg('rd'))).status).toBe(200);
    expect(await statusSoon(ids[0]!, 3)).toBe(3);
  });
});

describe('hostile upstream answers', () => {
  test('a 200 whose body is not JSON (an HTML page): 502 upstream_bad_response, not "could not be reached"; fails over', async () => {
    const { us, hits } = await trio('html', 'anthropic');
    us[0]!.fallback = { response: () => new Response('<html><body>Bad gateway</body></html>', { headers: { 'content-type': 'text/html' } }) };
    us[1]!.fallback = us[0]!.fallback;
    us[2]!.fallback = us[0]!.fallback;
    const u = await keyedUser(gw);
    const r = await send(nodeOne(gw), u.key, msg('html'));
    expect(r.status).toBe(502);
    expect(r.body.error.code).toBe('upstream_bad_response');
    expect(hits()).toEqual([1, 1, 1]);
  });

  test('an upstream 429 with a huge retry-after: the client is told at most 60 seconds', async () => {
    const { us } = await trio('ra', 'anthropic');
    for (const v of ['99999999999999999999', '86400']) {
      for (const x of us) x.fallback = { error: { status: 429, retryAfter: v } };
      const u = await keyedUser(gw);
      const r = await send(nodeOne(gw), u.key, msg('ra'));
      expect(r.status).toBe(429);
      expect(r.headers.get('retry-after')).toBe('60');
    }
    for (const x of us) x.fallback = { error: { status: 429, retryAfter: 7 } };
    const r = await send(nodeOne(gw), (await keyedUser(gw)).key, msg('ra'));
    expect(r.headers.get('retry-after')).toBe('7');
  });
});

describe('an upstream account out of credit', () => {
  // OpenAI answers an account without credit 429 `insufficient_quota`: no wait makes it pass. Told as a rate
  // limit, the client whose every channel was out of credit was asked to retry later (Claude Code retries 429s for
  // minutes), with the upstream's retry-after.
  const noCredit = { error: { status: 429, type: 'insufficient_quota', message: 'You exceeded your current quota, please check your plan and billing details.', retryAfter: 20 } };
  test('OpenAI 429 insufficient_quota: the key set aside (fails over, the channel with no key left disabled), and never a 429 to the client', async () => {
    const { us, ids, hits } = await trio('iq', 'openai');
    us[0]!.fallback = noCredit;
    const u = await keyedUser(gw);
    expect((await send(nodeOne(gw), u.key, msg('iq'))).status).toBe(200);
    expect((await send(nodeOne(gw), u.key, msg('iq'))).status).toBe(200);
    expect(await statusSoon(ids[0]!, 3)).toBe(3);
    for (const x of us) x.fallback = noCredit;
    const before = hits();
    const r = await send(nodeOne(gw), u.key, msg('iq'));
    // Each channel: the request, then the probe that confirms the refusal with the same key before it is set aside.
    expect(hits().map((h, i) => h - before[i]!)).toEqual([0, 2, 2]);
    expect(r.status).toBe(502);
    expect(r.body.error).toMatchObject({ type: 'api_error', code: 'upstream_quota_exhausted' });
    expect(r.headers.get('retry-after')).toBeNull();
  });
});

describe('an Anthropic account out of credit', () => {
  // Anthropic answers 400 invalid_request_error "Your credit balance is too low…": the gateway's account, not the
  // client's request. It was passed on as the client's 400 ("The upstream rejected the request: Your credit
  // balance is too low…"), never failing over, and kept being chosen first.
  const noCredit = { error: { status: 400, message: 'Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.' } };
  test('the key set aside, the request fails over; with no channel left 502 upstream_quota_exhausted', async () => {
    const { us, ids, hits } = await trio('cb', 'anthropic');
    us[0]!.fallback = noCredit;
    const u = await keyedUser(gw);
    expect((await send(nodeOne(gw), u.key, msg('cb'))).status).toBe(200);
    expect(await statusSoon(ids[0]!, 3)).toBe(3);
    for (const x of us) x.fallback = noCredit;
    const before = hits();
    const r = await send(nodeOne(gw), u.key, msg('cb'));
    // Each channel: the request, then the probe that confirms the refusal with the same key before it is set aside.
    expect(hits().map((h, i) => h - before[i]!)).toEqual([0, 2, 2]);
    expect(r.status).toBe(502);
    expect(r.body.error).toMatchObject({ type: 'api_error', code: 'upstream_quota_exhausted' });
  });
});

describe('hostile upstream answers to a stream', () => {
  test('a 200 whose body is not an event stream (HTML, a JSON object): fails over before anything is sent, nothing billed', async () => {
    for (const [kind, page] of [['anthropic', '<!DOCTYPE html><html><body>\n\nBad gateway\n\n</body></html>'], ['anthropic', '\n{"type":"error","error":{"type":"api_error","message":"x"}}'], ['openai', '<html></html>']] as const) {
      const { us, hits } = await trio(`nsse-${kind}-${page.length}`, kind);
      us[0]!.fallback = { response: () => new Response(page, { headers: { 'content-type': 'text/html' } }) };
      const u = await keyedUser(gw);
      const r = await send(nodeOne(gw), u.key, msg(`nsse-${kind}-${page.length}`, { stream: true }));
      expect(r.status).toBe(200);
      expect(r.text).toContain('message_stop');
      expect(r.text).not.toContain('event: error');
      expect(hits()).toEqual([1, 1, 0]);
      // All of them: a clear JSON error, no charge.
      us[1]!.fallback = us[0]!.fallback;
      us[2]!.fallback = us[0]!.fallback;
      const r2 = await send(nodeOne(gw), u.key, msg(`nsse-${kind}-${page.length}`, { stream: true }));
      expect(r2.status).toBe(502);
      expect(r2.body.error.code).toBe('upstream_bad_response');
      const rows = await rowsOf(u.id);
      expect(rows.at(-1).cost).toBe(0);
    }
  });

  test('a stream whose first event is an error (OpenRouter, or Anthropic overloaded) fails over before anything is sent; with no channel left, an HTTP error', async () => {
    // Nothing reached the client yet: relaying a 200 that holds only an `error` event gave up where another channel
    // could answer, and told clients that retry on a status (429, 5xx) nothing they retry on.
    const cases = [
      ['openai', `data: ${JSON.stringify({ error: { message: 'Provider returned error', type: 'overloaded_error', code: 502 } })}\n\n`, 503, 'overloaded_error'],
      ['openai', `: OPENROUTER PROCESSING\n\ndata: ${JSON.stringify({ id: 'x', choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }], error: { message: 'boom', code: 500 } })}\n\n`, 502, 'api_error'],
      ['anthropic', `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } })}\n\n`, 503, 'overloaded_error'],
      ['anthropic', `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'rate_limit_error', message: 'slow down' } })}\n\n`, 429, 'rate_limit_error'],
    ] as const;
    for (const [i, [kind, body, status, type]] of cases.entries()) {
      const { us, hits } = await trio(`errfirst-${i}`, kind);
      us[0]!.fallback = { response: () => new Response(body, { headers: { 'content-type': 'text/event-stream' } }) };
      const u = await keyedUser(gw);
      const r = await send(nodeOne(gw), u.key, msg(`errfirst-${i}`, { stream: true }));
      expect(r.status).toBe(200);
      expect(r.text).toContain('message_stop');
      expect(r.text).not.toContain('event: error');
      expect(hits()).toEqual([1, 1, 0]);
      for (const x of us) x.fallback = us[0]!.fallback;
      const r2 = await send(nodeOne(gw), u.key, msg(`errfirst-${i}`, { stream: true }));
      expect(r2.status).toBe(status);
      expect(r2.body.error.type).toBe(type);
      expect((await rowsOf(u.id)).at(-1).cost).toBe(0);
    }
  });
});
