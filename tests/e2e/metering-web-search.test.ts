/**
 * Web searches (Anthropic's web_search server tool) are billed per search on top of tokens, over real HTTP:
 * - the upstream receives every web-search tool's max_uses capped at WEB_SEARCH_MAX_USES (a lower client
 *   value kept, a missing one set to the cap), so the reservation covers the most searches can cost;
 * - the charge is tokens + usage.server_tool_use.web_search_requests × the price (the row's `web_search`,
 *   else BILLING_WEB_SEARCH_PRICE, default QUOTA_PER_UNIT), exactly, from JSON answers and native streams;
 * - a count above Σ max_uses is clamped (implausible), an unusable one billed at that bound (invalid);
 * - a balance that covers the tokens but not the searches' worst case is refused before the upstream is called.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, send, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let ant: Scripted;
let oai: Scripted;
// 1 unit per input token, 2 per output token; a context window of 1,000 tokens keeps the worst case small:
// a web-search tool makes the input unmeasurable, so the request reserves 1,000 + 100 × 2 = 1,200 for tokens.
const PRICE = { input: 1_000_000, output: 2_000_000, cache_read: 0, cache_write: 0, context_window: 1000 };
// QUOTA_PER_UNIT's default: BILLING_WEB_SEARCH_PRICE's default.
const DEFAULT_SEARCH = 5000;
const TOKENS_WORST = 1000 + 100 * 2;
const CAP = 10;
const SEARCH = { type: 'web_search_20250305', name: 'web_search' };
// 10 input tokens + 5 output tokens = 20 units.
const USAGE = { input: 10, output: 5 };
const TOKENS_COST = 10 + 5 * 2;

beforeAll(async () => {
  gw = await startGateway();
  ant = upstream('anthropic');
  oai = upstream('openai');
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['ws', 'ws-own', 'ws-tiered'], group: 'default,gold' });
  expect((await gw.api('POST', '/api/group/', { name: 'gold', ratio: 1500 })).status).toBe(200);
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['ws-oai'] });
  for (const model of ['ws', 'ws-oai']) expect((await gw.api('PUT', '/api/pricing/', { model, ...PRICE })).status).toBe(200);
  // A long-context tier above the window: no single sampling of a request can reach it.
  const tiered = await gw.api('PUT', '/api/pricing/', { model: 'ws-tiered', ...PRICE, long_context_threshold: 1000,
    long_context: { input: 2_000_000, output: 4_000_000, cache_read: 0, cache_write: 0 } });
  expect(tiered.status).toBe(200);
  const own = await gw.api('PUT', '/api/pricing/', { model: 'ws-own', ...PRICE, web_search: 7 });
  expect(own.status).toBe(200);
  expect(own.body.data.web_search).toBe(7);
});
afterAll(async () => { await ant.stop(); await oai.stop(); await gw.stop(); });

// The committed balance (settlements flushed first).
const balanceOf = async (_: TestGateway, id: number) => { gw.services.relay.quota.flush(); return (await gw.services.users.byId(id))!.quota; };
const logOf = (requestId: string | null) => gw.db.get('select * from usage_logs where request_id = ?', requestId);
const toolsSent = () => ant.last().body.tools as Array<Record<string, unknown>>;

describe('web searches are billed per search', () => {
  test('JSON answer with 3 searches: tokens + 3 × the default price, exactly; max_uses absent → the cap', async () => {
    const u = await keyedUser(gw, 1_000_000);
    ant.queue.push({ usage: { ...USAGE, webSearch: 3 } });
    const r = await send(gw, u.key, msg('ws', { tools: [SEARCH] }));
    expect(r.status).toBe(200);
    expect(r.body.usage.server_tool_use).toEqual({ web_search_requests: 3 });
    expect(toolsSent()).toEqual([{ ...SEARCH, max_uses: CAP }]);
    const cost = TOKENS_COST + 3 * DEFAULT_SEARCH;
    expect(await logOf(r.headers.get('request-id'))).toMatchObject({ web_search_requests: 3, cost, usage_flag: '' });
    expect(await balanceOf(gw, u.id)).toBe(1_000_000 - cost);
    // The usage log API shows the count.
    const logs = await gw.api('GET', `/api/log/?user_id=${u.id}`);
    expect(logs.body.data.items[0]).toMatchObject({ web_search_requests: 3, cost });
    // And the exports: a CSV column, a JSON Lines field.
    const get = (path: string) => fetch(gw.url + path, { headers: { authorization: `Bearer ${gw.rootToken}` } }).then((x) => x.text());
    const [head, line] = (await get(`/api/log/export?format=csv&user_id=${u.id}`)).trim().split('\r\n');
    const cols = head!.split(',');
    expect(line!.split(',')[cols.indexOf('web_search_requests')]).toBe('3');
    expect(JSON.parse((await get(`/api/log/export?format=jsonl&user_id=${u.id}`)).trim())).toMatchObject({ web_search_requests: 3, cost });
  });

  test('stream whose message_delta reports 2 searches: tokens + 2 × the price; client max_uses 50 → the cap', async () => {
    const u = await keyedUser(gw, 1_000_000);
    ant.queue.push({ usage: { ...USAGE, webSearch: 2 } });
    const r = await send(gw, u.key, msg('ws', { stream: true, tools: [{ ...SEARCH, max_uses: 50 }] }));
    expect(r.status).toBe(200);
    expect(r.text).toContain('"web_search_requests":2');
    expect(toolsSent()).toEqual([{ ...SEARCH, max_uses: CAP }]);
    const cost = TOKENS_COST + 2 * DEFAULT_SEARCH;
    expect(await logOf(r.headers.get('request-id'))).toMatchObject({ web_search_requests: 2, cost, usage_flag: '' });
    expect(await balanceOf(gw, u.id)).toBe(1_000_000 - cost);
  });

  test('a lower client max_uses is kept; a count above Σ max_uses is clamped to it and flagged implausible', async () => {
    const u = await keyedUser(gw, 1_000_000);
    ant.queue.push({ usage: { ...USAGE, webSearch: 5 } });
    const r = await send(gw, u.key, msg('ws', { tools: [{ ...SEARCH, max_uses: 3, allowed_domains: ['example.com'] }] }));
    expect(r.status).toBe(200);
    expect(toolsSent()).toEqual([{ ...SEARCH, max_uses: 3, allowed_domains: ['example.com'] }]);
    const cost = TOKENS_COST + 3 * DEFAULT_SEARCH;
    expect(await logOf(r.headers.get('request-id'))).toMatchObject({ web_search_requests: 3, cost, usage_flag: 'implausible' });
    expect(await balanceOf(gw, u.id)).toBe(1_000_000 - cost);
  });

  test('a server-tool loop samples once per call: its input is billed up to one context window per sampling, no more', async () => {
    // max_uses 3: at most 4 samplings, so up to 4 × the 1,000-token window. Before, input above one window was cut to it.
    for (const stream of [false, true]) {
      for (const [reported, billed, flag] of [[3_500, 3_500, ''], [9_000, 4_000, 'implausible']] as const) {
        const u = await keyedUser(gw, 1_000_000);
        ant.queue.push({ usage: { input: reported, output: 5, webSearch: 3 } });
        const r = await send(gw, u.key, msg('ws', { stream, tools: [{ ...SEARCH, max_uses: 3 }] }));
        expect(r.status).toBe(200);
        const cost = billed + 5 * 2 + 3 * DEFAULT_SEARCH;
        expect(await logOf(r.headers.get('request-id'))).toMatchObject({ input_tokens: billed, cost, usage_flag: flag });
        expect(await balanceOf(gw, u.id)).toBe(1_000_000 - cost);
      }
    }
    // Without a server tool the bound stays one window.
    const u = await keyedUser(gw, 1_000_000);
    ant.queue.push({ usage: { input: 3_500, output: 5 } });
    const r = await send(gw, u.key, msg('ws', { tools: [{ name: 'lookup', input_schema: { type: 'object' } }] }));
    expect(r.status).toBe(200);
    expect(await logOf(r.headers.get('request-id'))).toMatchObject({ input_tokens: 1000, usage_flag: 'implausible' });
  });

  test('a server-tool loop\'s summed input is no one sampling\'s: it does not reach a long-context tier no sampling can reach', async () => {
    // Window 1,000 = threshold: each of the up to 4 samplings holds at most 1,000 tokens, so none is long-context.
    const u = await keyedUser(gw, 1_000_000);
    ant.queue.push({ usage: { input: 3_500, output: 5, webSearch: 3 } });
    const r = await send(gw, u.key, msg('ws-tiered', { tools: [{ ...SEARCH, max_uses: 3 }] }));
    expect(r.status).toBe(200);
    const cost = 3_500 + 5 * 2 + 3 * DEFAULT_SEARCH;
    expect(await logOf(r.headers.get('request-id'))).toMatchObject({ input_tokens: 3_500, long_context: 0, cost, usage_flag: '' });
    expect(await balanceOf(gw, u.id)).toBe(1_000_000 - cost);
  });

  test('streams too: a reported count above the bound is clamped', async () => {
    const u = await keyedUser(gw, 1_000_000);
    ant.queue.push({ usage: { ...USAGE, webSearch: 99 } });
    const r = await send(gw, u.key, msg('ws', { stream: true, tools: [{ ...SEARCH, max_uses: 2 }, { type: 'web_search_20250305', name: 'web_search_2' }] }));
    expect(r.status).toBe(200);
    // Two web-search tools: 2 + 10 searches at most.
    expect(await logOf(r.headers.get('request-id'))).toMatchObject({ web_search_requests: 12, cost: TOKENS_COST + 12 * DEFAULT_SEARCH, usage_flag: 'implausible' });
  });

  test('an unusable count (a string, a fraction, a negative) is billed at the bound and flagged invalid', async () => {
    for (const bad of ['3', 1.5, -2]) {
      const u = await keyedUser(gw, 1_000_000);
      ant.queue.push({ usage: { ...USAGE, webSearch: bad } });
      const r = await send(gw, u.key, msg('ws', { tools: [{ ...SEARCH, max_uses: 4 }] }));
      expect(r.status).toBe(200);
      expect(await logOf(r.headers.get('request-id'))).toMatchObject({ web_search_requests: 4, cost: TOKENS_COST + 4 * DEFAULT_SEARCH, usage_flag: 'invalid' });
    }
  });

  test('a stream cut before its message_delta bills the searches seen so far (none)', async () => {
    const u = await keyedUser(gw, 1_000_000);
    // message_start, content_block_start, ping, then cut: no message_delta.
    ant.queue.push({ usage: { ...USAGE, webSearch: 4 }, cutAfter: 3 });
    const r = await send(gw, u.key, msg('ws', { stream: true, tools: [SEARCH] }));
    expect(r.status).toBe(200);
    const row = await logOf(r.headers.get('request-id'));
    expect(row).toMatchObject({ web_search_requests: 0 });
    expect(row.usage_flag).toContain('estimated');
    expect(row.cost).toBeLessThan(DEFAULT_SEARCH);
  });

  test('a stream cut after a message_delta that reported 2 searches bills those 2', async () => {
    const u = await keyedUser(gw, 1_000_000);
    const ev = (name: string, data: unknown) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
    ant.queue.push({
      response: () => new Response([
        ev('message_start', { type: 'message_start', message: { id: 'msg_c', type: 'message', role: 'assistant', model: 'ws', content: [], stop_reason: null, stop_sequence: null,
          usage: { input_tokens: 10, output_tokens: 1, server_tool_use: { web_search_requests: 0 } } } }),
        ev('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }),
        ev('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi' } }),
        ev('content_block_stop', { type: 'content_block_stop', index: 0 }),
        ev('message_delta', { type: 'message_delta', delta: { stop_reason: 'pause_turn', stop_sequence: null }, usage: { output_tokens: 5, server_tool_use: { web_search_requests: 2 } } }),
        // No message_stop: the upstream ends the stream here.
      ].join(''), { headers: { 'content-type': 'text/event-stream' } }),
    });
    const r = await send(gw, u.key, msg('ws', { stream: true, tools: [SEARCH] }));
    expect(r.status).toBe(200);
    const row = await logOf(r.headers.get('request-id'));
    expect(row).toMatchObject({ web_search_requests: 2, input_tokens: 10, output_tokens: 5, cost: TOKENS_COST + 2 * DEFAULT_SEARCH });
    expect(row.error_code).not.toBe('');
  });

  test('a balance that covers the tokens but not the searches\' worst case is refused 402 before the upstream is called', async () => {
    const worst = TOKENS_WORST + CAP * DEFAULT_SEARCH;
    const poor = await keyedUser(gw, worst - 1);
    const hits = ant.hits;
    const refused = await send(gw, poor.key, msg('ws', { tools: [{ ...SEARCH, max_uses: 50 }] }));
    expect(refused.status).toBe(402);
    expect(ant.hits).toBe(hits);
    // The same balance without the tool is plenty.
    ant.queue.push({ usage: USAGE });
    expect((await send(gw, poor.key, msg('ws'))).status).toBe(200);
    // Exactly the worst case is enough.
    const enough = await keyedUser(gw, worst);
    ant.queue.push({ usage: { ...USAGE, webSearch: CAP } });
    const r = await send(gw, enough.key, msg('ws', { tools: [SEARCH] }));
    expect(r.status).toBe(200);
    expect(ant.hits).toBe(hits + 2);
    expect(await balanceOf(gw, enough.id)).toBe(worst - TOKENS_COST - CAP * DEFAULT_SEARCH);
  });

  test('a price row\'s own web_search wins over the default, for the reservation and the charge', async () => {
    // Worst case at 7 per search: 1,200 + 10 × 7 = 1,270.
    const u = await keyedUser(gw, TOKENS_WORST + CAP * 7);
    ant.queue.push({ usage: { ...USAGE, webSearch: 3 } });
    const r = await send(gw, u.key, msg('ws-own', { tools: [SEARCH] }));
    expect(r.status).toBe(200);
    expect(await logOf(r.headers.get('request-id'))).toMatchObject({ web_search_requests: 3, cost: TOKENS_COST + 21, usage_flag: '' });
    expect(await balanceOf(gw, u.id)).toBe(TOKENS_WORST + CAP * 7 - TOKENS_COST - 21);
    const poor = await keyedUser(gw, TOKENS_WORST + CAP * 7 - 1);
    expect((await send(gw, poor.key, msg('ws-own', { tools: [SEARCH] }))).status).toBe(402);
    // Unset shows as null (the default applies).
    expect((await gw.api('GET', '/api/pricing/ws')).body.data.web_search).toBeNull();
    // Quota units per search: a non-negative integer (or null).
    for (const bad of [-1, 1.5, '5']) expect((await gw.api('PUT', '/api/pricing/', { model: 'ws-bad', ...PRICE, web_search: bad })).status).toBe(400);
    expect((await gw.api('PUT', '/api/pricing/', { model: 'ws-zero', ...PRICE, web_search: 0 })).body.data.web_search).toBe(0);
  });

  test('the group\'s price ratio applies to searches like tokens, in the reservation and the charge, one rounding', async () => {
    // Worst case ×1.5: (1,200 + 10 × 5,000) × 1.5 = 76,800; one unit less is refused.
    const worst = (TOKENS_WORST + CAP * DEFAULT_SEARCH) * 1.5;
    const poor = await keyedUser(gw, worst - 1);
    expect((await gw.api('PUT', '/api/token/', { id: poor.keyId, group: 'gold' })).status).toBe(200);
    expect((await send(gw, poor.key, msg('ws', { tools: [SEARCH] }))).status).toBe(402);
    const u = await keyedUser(gw, worst);
    expect((await gw.api('PUT', '/api/token/', { id: u.keyId, group: 'gold' })).status).toBe(200);
    // 11 input tokens + 5 output + 3 searches = 15,021 × 1.5 = 22,531.5 → 22,532.
    ant.queue.push({ usage: { input: 11, output: 5, webSearch: 3 } });
    const r = await send(gw, u.key, msg('ws', { tools: [SEARCH] }));
    expect(r.status).toBe(200);
    expect(await logOf(r.headers.get('request-id'))).toMatchObject({ web_search_requests: 3, cost: 22_532, price_ratio: 1500, group: 'gold' });
    expect(await balanceOf(gw, u.id)).toBe(worst - 22_532);
  });

  test('an OpenAI-compatible channel refuses the server tool as before (400), and nothing is charged', async () => {
    const u = await keyedUser(gw, 1_000_000);
    const hits = oai.hits;
    const r = await send(gw, u.key, msg('ws-oai', { tools: [SEARCH] }));
    expect(r.status).toBe(400);
    expect(r.body.error.message).toContain('web_search_20250305');
    expect(oai.hits).toBe(hits);
    expect(await balanceOf(gw, u.id)).toBe(1_000_000);
  });

  test('a stream the client leaves after the search results, before the message_delta that reports them: the delivered searches and their input are billed', async () => {
    const u = await keyedUser(gw, 1_000_000);
    const enc = new TextEncoder();
    const ev = (name: string, data: unknown) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
    const result = (i: number) => ev('content_block_start', { type: 'content_block_start', index: i, content_block: { type: 'web_search_tool_result', tool_use_id: `srvtoolu_${i}`,
      content: [{ type: 'web_search_result', url: 'https://e.com', title: 'E', encrypted_content: 'x'.repeat(400) }] } }) + ev('content_block_stop', { type: 'content_block_stop', index: i });
    ant.queue.push({
      // As Anthropic streams a searched answer: message_start has the pre-search input and no count; the final
      // message_delta (never sent here) would carry both.
      response: () => new Response(new ReadableStream({
        async start(c) {
          c.enqueue(enc.encode(ev('message_start', { type: 'message_start', message: { id: 'msg_s', type: 'message', role: 'assistant', model: 'ws', content: [], stop_reason: null, stop_sequence: null,
            usage: { input_tokens: 50, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 1 } } })
            + ev('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: {} } })
            + ev('content_block_stop', { type: 'content_block_stop', index: 0 }) + result(1) + result(2)
            + ev('content_block_start', { type: 'content_block_start', index: 3, content_block: { type: 'text', text: '' } })
            + ev('content_block_delta', { type: 'content_block_delta', index: 3, delta: { type: 'text_delta', text: 'The answer is 42.' } })));
          await Bun.sleep(5000);
          try { c.close(); } catch { /* cancelled */ }
        },
      }), { headers: { 'content-type': 'text/event-stream' } }),
    });
    const ctrl = new AbortController();
    const res = await fetch(`${gw.url}/v1/messages`, { method: 'POST', signal: ctrl.signal,
      headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'x-api-key': u.key },
      body: JSON.stringify(msg('ws', { stream: true, tools: [SEARCH] })) });
    const id = res.headers.get('request-id');
    const reader = res.body!.getReader();
    let seen = '';
    while (!seen.includes('The answer is 42.')) seen += new TextDecoder().decode((await reader.read()).value);
    ctrl.abort();
    const t0 = Date.now();
    while (!(await logOf(id)) && Date.now() - t0 < 3000) await Bun.sleep(20);
    const row = await logOf(id);
    expect(row).toMatchObject({ web_search_requests: 2, error_code: 'client_closed' });
    // The results' text is input the next sampling reads: estimated on top of message_start's 50.
    expect(row.input_tokens).toBeGreaterThan(50 + 200);
    expect(row.usage_flag).toContain('estimated');
    expect(row.cost).toBe(row.input_tokens + row.output_tokens * 2 + 2 * DEFAULT_SEARCH);
  }, 15_000);

  test('a max_uses that is not a positive integer is the client\'s 400 with the error object, nothing sent', async () => {
    const u = await keyedUser(gw, 1_000_000);
    const before = ant.hits;
    const r = await send(gw, u.key, msg('ws', { tools: [{ name: 'x', input_schema: { type: 'object' } }, { ...SEARCH, max_uses: 0 }] }));
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ type: 'invalid_request_error', param: 'tools.1.max_uses' });
    expect(ant.hits).toBe(before);
  });
});

