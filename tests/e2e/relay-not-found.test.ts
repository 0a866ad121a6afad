/**
 * Whose 404 is it. Routing is by exact model name, so the model an upstream is asked for is always one the operator
 * listed or mapped: an upstream "model not found" is the channel's (a typo in its models or mapping), and so is a 404
 * for the path (a wrong base_url). Both fail over and count against the channel. A 404 to a request that names
 * upstream objects by id (a `file` source, a `container_upload` block, a `container`) is the client's: those ids
 * belong to the account that made them, which no other channel shares, so the client gets the 404 at once, no
 * failover, no health change.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, nodeOne, send, setPrice, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
const ups: Scripted[] = [];
const up = (kind: 'anthropic' | 'openai' = 'anthropic') => { const u = upstream(kind); ups.push(u); return u; };
beforeAll(async () => {
  // The prober never runs, so hit counts are exact; failures are counted, never enough to disable.
  gw = await startGateway({ RELAY_HEALTH_FAILURES: '100', RELAY_PROBE_INTERVAL_MS: '3600000', RELAY_MAX_ATTEMPTS: '3' });
});
afterAll(async () => { for (const u of ups) await u.stop(); await gw.stop(); });

// Failure counts are per node: every request here goes to node 1, whose counts these are.
const n1 = () => nodeOne(gw);
const failures = (id: number) => gw.services.relay.health.recentFailures(id);
const rowsOf = (userId: number) => gw.db.all('select status, error_code, channel_id, attempts, cost from usage_logs where user_id = ? order by id', userId);

/** Three channels for `model`, priorities 3, 2, 1. */
async function trio(model: string, kind: 'anthropic' | 'openai' = 'anthropic') {
  await setPrice(gw, model);
  const us = [up(kind), up(kind), up(kind)];
  const ids: number[] = [];
  for (const [i, u] of us.entries()) ids.push(await addChannel(gw, { type: kind, url: u.url, models: [model], priority: 3 - i }));
  return { us, ids, hits: () => us.map((u) => u.hits), failures: () => ids.map(failures) };
}

const fileDoc = (model: string, extra: Record<string, unknown> = {}) => msg(model, {
  messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'file', file_id: 'file_011CNha8iCJcU1wXNR6q4V8w' } }, { type: 'text', text: 'Summarise' }] }],
  ...extra,
});
const notFound = { error: { status: 404, message: 'File not found: file_011CNha8iCJcU1wXNR6q4V8w' } };

describe("the client's 404: an id of its own the upstream does not know", () => {
  test('a file source: 404 not_found_error with the upstream message, one channel asked, no health change', async () => {
    const t = await trio('nf-file');
    for (const u of t.us) u.fallback = notFound;
    const u = await keyedUser(gw);
    for (let i = 0; i < 3; i++) {
      const r = await send(n1(), u.key, fileDoc('nf-file'));
      expect(r.status).toBe(404);
      expect(r.body.error.type).toBe('not_found_error');
      expect(r.body.error.code).toBe('upstream_object_not_found');
      expect(r.body.error.message).toContain('File not found: file_011CNha8iCJcU1wXNR6q4V8w');
    }
    expect(t.hits()).toEqual([3, 0, 0]);
    expect(t.failures()).toEqual([0, 0, 0]);
    const rows = await rowsOf(u.id);
    expect(rows.map((r: any) => [r.status, r.error_code, r.attempts, r.cost])).toEqual(Array(3).fill([404, 'upstream_object_not_found', 1, 0]));
    // The channel still serves everyone else.
    t.us[0]!.fallback = { text: 'ok' };
    expect((await send(n1(), u.key, msg('nf-file'))).status).toBe(200);
  });

  test('a container id and a container_upload block, streaming: the same, answered before anything is streamed', async () => {
    const t = await trio('nf-container');
    for (const u of t.us) u.fallback = { error: { status: 404, message: 'Container not found' } };
    const u = await keyedUser(gw);
    const byContainer = msg('nf-container', { stream: true, container: 'container_011CNhb1hiuLqTm5V4xRLNAX' });
    const byUpload = msg('nf-container', { stream: true, messages: [{ role: 'user', content: [{ type: 'container_upload', file_id: 'file_011CNhbXj2n8Jdm3WpsHu8Qe' }, { type: 'text', text: 'run it' }] }] });
    for (const body of [byContainer, byUpload]) {
      const r = await send(n1(), u.key, body);
      expect(r.status).toBe(404);
      expect(r.body.error.code).toBe('upstream_object_not_found');
    }
    expect(t.hits()).toEqual([2, 0, 0]);
    expect(t.failures()).toEqual([0, 0, 0]);
  });

  test('a stream whose first event is a not_found_error for a file the request names: the client\'s 404', async () => {
    const t = await trio('nf-event');
    const event = `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'not_found_error', message: 'File not found: file_011CNha8iCJcU1wXNR6q4V8w' } })}\n\n`;
    for (const u of t.us) u.fallback = { response: () => new Response(event, { headers: { 'content-type': 'text/event-stream' } }) };
    const u = await keyedUser(gw);
    const r = await send(n1(), u.key, fileDoc('nf-event', { stream: true }));
    expect(r.status).toBe(404);
    expect(r.body.error.code).toBe('upstream_object_not_found');
    expect(t.hits()).toEqual([1, 0, 0]);
    expect(t.failures()).toEqual([0, 0, 0]);
  });
});

describe("the operator's 404: still a channel fault that fails over", () => {
  test('the upstream does not know the (mapped) model: the next channel answers, the first is charged a failure', async () => {
    const t = await trio('nf-typo');
    t.us[0]!.fallback = { error: { status: 404, message: 'model: claude-sonet-4 not found' } };
    const u = await keyedUser(gw);
    const r = await send(n1(), u.key, msg('nf-typo'));
    expect(r.status).toBe(200);
    expect(t.hits()).toEqual([1, 1, 0]);
    expect(t.failures()).toEqual([1, 0, 0]);
  });

  test('the model not found, to a request that also names a file: still the channel\'s; its upstream name is never shown', async () => {
    // Any client can add a file block: the channel's own 404 must not become the client's, nor show its mapping.
    const t = await trio('nf-typo-file');
    t.us[0]!.fallback = { error: { status: 404, message: 'model: secret-upstream-name-7' } };
    const u = await keyedUser(gw);
    const r = await send(n1(), u.key, fileDoc('nf-typo-file'));
    expect(r.status).toBe(200);
    expect(JSON.stringify(r.body)).not.toContain('secret-upstream-name-7');
    expect(t.hits()).toEqual([1, 1, 0]);
    expect(t.failures()).toEqual([1, 0, 0]);
    t.us[1]!.fallback = { error: { status: 404, message: 'model: secret-upstream-name-7' } };
    t.us[2]!.fallback = { error: { status: 404, message: 'model: secret-upstream-name-7' } };
    const all = await send(n1(), u.key, fileDoc('nf-typo-file'));
    expect(all.status).toBeGreaterThanOrEqual(400);
    expect(JSON.stringify(all.body)).not.toContain('secret-upstream-name-7');
  });

  test('a wrong base_url (404 for the path): the next channel answers, the first is charged a failure', async () => {
    await setPrice(gw, 'nf-path');
    const [a, b] = [up(), up()];
    const bad = await addChannel(gw, { type: 'anthropic', url: `${a.url}/anthropic`, models: ['nf-path'], priority: 2 });
    const good = await addChannel(gw, { type: 'anthropic', url: b.url, models: ['nf-path'], priority: 1 });
    const u = await keyedUser(gw);
    const r = await send(n1(), u.key, msg('nf-path'));
    expect(r.status).toBe(200);
    expect(a.last().path).toBe('/anthropic/v1/messages');
    expect([a.hits, b.hits]).toEqual([1, 1]);
    expect([failures(bad), failures(good)]).toEqual([1, 0]);
  });

  test('a translated channel never sends the ids on: its 404 to a request naming a container is still the channel\'s', async () => {
    const t = await trio('nf-openai', 'openai');
    t.us[0]!.fallback = { error: { status: 404, message: 'The model `nf-openai-typo` does not exist' } };
    const u = await keyedUser(gw);
    const r = await send(n1(), u.key, msg('nf-openai', { container: 'container_011CNhb1hiuLqTm5V4xRLNAX' }));
    expect(r.status).toBe(200);
    expect(t.us[0]!.last().body.container).toBeUndefined();
    expect(t.hits()).toEqual([1, 1, 0]);
    expect(t.failures()).toEqual([1, 0, 0]);
  });

  test('a container the operator\'s override sets, not the client: the channel\'s 404, failed over and charged', async () => {
    await setPrice(gw, 'nf-operator');
    const [a, b] = [up(), up()];
    a.fallback = { error: { status: 404, message: 'Container not found' } };
    const r0 = await gw.api('POST', '/api/channel/', {
      name: 'ch-operator-container', type: 'anthropic', base_url: a.url, key: 'upstream-key', models: ['nf-operator'], priority: 2, timeout_ms: 5000,
      overrides: [{ op: 'set', path: 'container', value: 'container_011CNhbOperatorOwnsThis0' }],
    });
    expect(r0.status).toBe(200);
    const withOverride = r0.body.data.id as number;
    const plain = await addChannel(gw, { type: 'anthropic', url: b.url, models: ['nf-operator'], priority: 1 });
    const u = await keyedUser(gw);
    const r = await send(n1(), u.key, msg('nf-operator'));
    expect(r.status).toBe(200);
    expect(a.last().body.container).toBe('container_011CNhbOperatorOwnsThis0');
    expect([a.hits, b.hits]).toEqual([1, 1]);
    expect([failures(withOverride), failures(plain)]).toEqual([1, 0]);
  });

  test('with no channel left, a plain request gets the 502 upstream_not_found, never the upstream\'s text', async () => {
    const t = await trio('nf-all');
    for (const u of t.us) u.fallback = { error: { status: 404, message: 'model: nf-all-typo not found' } };
    const u = await keyedUser(gw);
    const r = await send(n1(), u.key, msg('nf-all'));
    expect(r.status).toBe(502);
    expect(r.body.error.code).toBe('upstream_not_found');
    expect(JSON.stringify(r.body)).not.toContain('nf-all-typo');
    expect(t.hits()).toEqual([1, 1, 1]);
    expect(t.failures()).toEqual([1, 1, 1]);
  });
});
