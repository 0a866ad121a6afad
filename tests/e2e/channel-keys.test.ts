/**
 * Multi-key channels over real HTTP: a key the upstream refuses is set aside (auto-disabled with reason
 * and time) while the channel stays enabled and requests succeed on its other keys; round robin spreads
 * evenly; the channel goes down only with its last usable key, and the prober brings keys back.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { startAnthropicUpstream, type UpstreamDouble, type UpstreamPlan } from '../doubles/anthropic-upstream';
import { keyedUser, msg, nodeOne, send, setPrice } from './relay-setup';

let gw: TestGateway;
const doubles: UpstreamDouble[] = [];
beforeAll(async () => {
  // The prober never runs on its own here: tests call probeOnce() so counts are exact.
  gw = await startGateway({ RELAY_HEALTH_FAILURES: '3', RELAY_PROBE_INTERVAL_MS: '3600000', RELAY_MAX_ATTEMPTS: '3' });
});
afterAll(async () => { for (const d of doubles) await d.stop(); await gw.stop(); });

/** An upstream that answers by the key it receives: `plan(key)`. */
function keyedUpstream(plan: (key: string) => UpstreamPlan | undefined) {
  const d = startAnthropicUpstream({ maxRecorded: 1000 });
  doubles.push(d);
  const seen: string[] = [];
  d.script((req) => {
    const key = req.headers['x-api-key'] ?? '';
    seen.push(key);
    return plan(key) ?? {};
  });
  return { url: d.url, seen, count: (k: string) => seen.filter((s) => s === k).length };
}

async function channel(url: string, model: string, keys: string[], extra: Record<string, unknown> = {}): Promise<number> {
  await setPrice(gw, model);
  const r = await gw.api('POST', '/api/channel/', {
    name: `keys-${model}`, type: 'anthropic', base_url: url, key: keys[0], keys: keys.slice(1), models: [model], timeout_ms: 5000, ...extra,
  });
  if (r.status !== 200) throw new Error(`channel create: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.data.id;
}

const keysOf = async (id: number) => (await gw.api('GET', `/api/channel/${id}/keys`)).body.data as any[];
/** Key refusals are written beside the request (not awaited by it): wait for them rather than race them (PostgreSQL writes take longer). */
const keyStatusesSoon = async (id: number, want: number[]) => {
  let got: number[] = [];
  for (let i = 0; i < 100; i++) {
    got = (await keysOf(id)).map((k) => k.status);
    if (JSON.stringify(got) === JSON.stringify(want)) break;
    await Bun.sleep(20);
  }
  return got;
};
const channelStatus = (id: number) => gw.services.channelRegistry.get(id)!.status;
/** A channel disabled because its last key went is written after the request, like the key refusal: wait for it. */
const channelStatusSoon = async (id: number, want: number) => {
  for (let i = 0; i < 100 && channelStatus(id) !== want; i++) await Bun.sleep(20);
  return channelStatus(id);
};

describe('multi-key channels', () => {
  test('a key refused with 401 is auto-disabled; requests keep succeeding on the other keys; the channel stays enabled', async () => {
    const up = keyedUpstream((k) => (k === 'sk-bad-key-22222222' ? { error: { status: 401, message: 'invalid x-api-key' } } : undefined));
    const id = await channel(up.url, 'mk-401', ['sk-good-key-1111111', 'sk-bad-key-22222222', 'sk-good-key-3333333']);
    const u = await keyedUser(gw);
    // Random selection: 30 requests miss the bad key with probability (2/3)^30 ≈ 5e-6. All to node 1: another
    // node may try the key once before it hears of the disable (README: Running a cluster).
    for (let i = 0; i < 30; i++) expect((await send(nodeOne(gw), u.key, msg('mk-401'))).status).toBe(200);
    // The refused request and the probe that confirmed the key is refused.
    expect(up.count('sk-bad-key-22222222')).toBe(2);
    expect(channelStatus(id)).toBe(1);
    const keys = await keysOf(id);
    expect(keys.map((k) => k.status)).toEqual([1, 3, 1]);
    expect(keys[1].reason).toContain('401');
    expect(keys[1].disabled_at).toBeGreaterThan(0);
    expect(keys[1].failures).toBe(1);
    // Counters add up to the upstream's own count but the probe; nothing in the listing shows a whole key.
    expect(keys.reduce((n, k) => n + k.requests, 0)).toBe(up.seen.length - 1);
    const text = JSON.stringify(keys);
    for (const k of ['sk-good-key-1111111', 'sk-bad-key-22222222', 'sk-good-key-3333333']) expect(text).not.toContain(k);
  });

  test('failover to the next key happens inside the same request (the refused key is never retried)', async () => {
    const up = keyedUpstream((k) => (k === 'sk-dead-00000001' || k === 'sk-dead-00000002' ? { error: { status: 403, message: 'forbidden' } } : undefined));
    const id = await channel(up.url, 'mk-403', ['sk-dead-00000001', 'sk-dead-00000002', 'sk-live-00000003'], { key_selection: 'round_robin' });
    const u = await keyedUser(gw);
    const r = await send(gw, u.key, msg('mk-403'));
    expect(r.status).toBe(200);
    // Round robin starts at key 1: 1 refused (and its probe), 2 refused (and its probe), 3 answers, all in one request.
    expect(up.seen).toEqual(['sk-dead-00000001', 'sk-dead-00000001', 'sk-dead-00000002', 'sk-dead-00000002', 'sk-live-00000003']);
    expect(await keyStatusesSoon(id, [3, 3, 1])).toEqual([3, 3, 1]);
    expect(channelStatus(id)).toBe(1);
    expect((await send(gw, u.key, msg('mk-403'))).status).toBe(200);
    expect(up.seen.at(-1)).toBe('sk-live-00000003');
  });

  test('429 insufficient_quota and 402 set a key aside; a plain 429 rate limit does not', async () => {
    const plans: Record<string, UpstreamPlan> = {
      'sk-quota-aaaaaaaa': { error: { status: 429, type: 'insufficient_quota', message: 'You exceeded your current quota, please check your plan and billing details.' } },
      'sk-unpaid-bbbbbbbb': { error: { status: 402, message: 'payment required' } },
    };
    const up = keyedUpstream((k) => plans[k]);
    const id = await channel(up.url, 'mk-quota', ['sk-quota-aaaaaaaa', 'sk-unpaid-bbbbbbbb', 'sk-fine-cccccccc'], { key_selection: 'round_robin' });
    const u = await keyedUser(gw);
    expect((await send(gw, u.key, msg('mk-quota'))).status).toBe(200);
    expect(await keyStatusesSoon(id, [3, 3, 1])).toEqual([3, 3, 1]);

    const up2 = keyedUpstream((k) => (k === 'sk-busy-dddddddd' ? { error: { status: 429, message: 'rate limited, slow down' } } : undefined));
    const id2 = await channel(up2.url, 'mk-busy', ['sk-busy-dddddddd', 'sk-calm-eeeeeeee'], { key_selection: 'round_robin' });
    await send(gw, u.key, msg('mk-busy'));
    expect((await keysOf(id2)).map((k) => k.status)).toEqual([1, 1]);
  });

  test('round robin spreads requests evenly over the usable keys', async () => {
    const up = keyedUpstream(() => undefined);
    await channel(up.url, 'mk-rr', ['sk-rr-key-0000001', 'sk-rr-key-0000002', 'sk-rr-key-0000003'], { key_selection: 'round_robin' });
    const u = await keyedUser(gw);
    // The rotation is per node: all to node 1.
    for (let i = 0; i < 30; i++) expect((await send(nodeOne(gw), u.key, msg('mk-rr', { stream: i % 2 === 0 }))).status).toBe(200);
    expect([1, 2, 3].map((n) => up.count(`sk-rr-key-000000${n}`))).toEqual([10, 10, 10]);
  });

  test('the channel is auto-disabled only when its last usable key goes; the prober re-enables keys and the channel', async () => {
    let accept = false;
    const up = keyedUpstream(() => (accept ? undefined : { error: { status: 401, message: 'revoked' } }));
    const id = await channel(up.url, 'mk-all', ['sk-all-key-0000001', 'sk-all-key-0000002']);
    const u = await keyedUser(gw);
    const r = await send(gw, u.key, msg('mk-all'));
    expect(r.status).toBe(502);
    // Each key: the request and the probe that confirmed the refusal.
    expect(up.seen.length).toBe(4);
    expect(await channelStatusSoon(id, 3)).toBe(3);
    expect((await gw.api('GET', `/api/channel/${id}`)).body.data.status_reason).toBe('no usable key left');
    expect((await send(gw, u.key, msg('mk-all'))).status).toBe(503);
    expect(await gw.services.relay.health.probeOnce()).toEqual([]);
    expect(channelStatus(id)).toBe(3);
    accept = true;
    await gw.services.relay.health.probeOnce();
    expect((await keysOf(id)).map((k) => k.status)).toEqual([1, 1]);
    expect(channelStatus(id)).toBe(1);
    expect((await send(gw, u.key, msg('mk-all'))).status).toBe(200);
  });

  test('an operator-disabled key is never used nor re-enabled by the prober', async () => {
    const up = keyedUpstream(() => undefined);
    const id = await channel(up.url, 'mk-op', ['sk-op-key-00000001', 'sk-op-key-00000002']);
    expect((await gw.api('POST', `/api/channel/${id}/keys/1/disable`)).body.data.status).toBe(2);
    const u = await keyedUser(gw);
    for (let i = 0; i < 6; i++) expect((await send(gw, u.key, msg('mk-op'))).status).toBe(200);
    expect(up.count('sk-op-key-00000001')).toBe(0);
    await gw.services.relay.health.probeOnce();
    expect((await keysOf(id))[0].status).toBe(2);
    expect((await gw.api('POST', `/api/channel/${id}/keys/1/enable`)).body.data.status).toBe(1);
  });
});

describe('hostile clients and key refusals', () => {
  // The upstream refuses a request for what it contains (a content filter, a feature the account may not use),
  // whichever key sends it; a neutral request with the same key succeeds.
  const hostile = (req: { body?: any }) => JSON.stringify(req.body?.messages ?? []).includes('FORBIDDEN-CONTENT');

  test('a 401/403 caused by the request\'s content disables no key and is not tried on the channel\'s other keys', async () => {
    const other = keyedUpstream(() => undefined);
    const seen: Array<{ hostile: boolean; key: string }> = [];
    const d = startAnthropicUpstream({ maxRecorded: 1000 });
    doubles.push(d);
    d.script((req) => {
      seen.push({ hostile: hostile(req), key: req.headers['x-api-key'] ?? '' });
      return hostile(req) ? { error: { status: 403, message: 'This request is not permitted for your organization' } } : {};
    });
    const a = await channel(d.url, 'mk-hostile', ['sk-hostile-key-0001', 'sk-hostile-key-0002', 'sk-hostile-key-0003'], { key_selection: 'round_robin', priority: 10 });
    // A second channel serving the same model, tried after the first (another account: it serves the request).
    const b = await channel(other.url, 'mk-hostile', ['sk-hostile-key-0004', 'sk-hostile-key-0005']);
    const u = await keyedUser(gw);
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push((await send(nodeOne(gw), u.key, { ...msg('mk-hostile'), messages: [{ role: 'user', content: 'FORBIDDEN-CONTENT' }] })).status);
    // Give any refusal written beside the request time to land.
    await Bun.sleep(200);
    expect((await keysOf(a)).map((k) => k.status)).toEqual([1, 1, 1]);
    expect((await keysOf(b)).map((k) => k.status)).toEqual([1, 1]);
    expect(channelStatus(a)).toBe(1);
    expect(channelStatus(b)).toBe(1);
    // Each request: one key of channel 1 (round robin), then channel 2. Each key is probed once (the 4th
    // request's key passed its probe within 10 s: no second probe).
    expect(statuses).toEqual([200, 200, 200, 200]);
    expect(seen.filter((x) => x.hostile).map((x) => x.key)).toEqual(['sk-hostile-key-0001', 'sk-hostile-key-0002', 'sk-hostile-key-0003', 'sk-hostile-key-0001']);
    expect(seen.filter((x) => !x.hostile).length).toBe(3);
    expect(other.seen.length).toBe(4);
    expect((await send(nodeOne(gw), u.key, msg('mk-hostile'))).status).toBe(200);
  }, 20_000);
});

describe('routing skips channels without a usable key', () => {
  test('a channel an operator enabled while all its keys are disabled takes no attempt (RELAY_MAX_ATTEMPTS=3)', async () => {
    const dead = keyedUpstream(() => undefined);
    const live = keyedUpstream(() => undefined);
    const ids: number[] = [];
    // Three channels ahead of the live one, each with its only key disabled by an operator, then enabled again.
    for (let i = 0; i < 3; i++) {
      const id = await channel(dead.url, 'mk-keyless', [`sk-keyless-${i}-000001`], { priority: 10 });
      expect((await gw.api('POST', `/api/channel/${id}/keys/1/disable`)).status).toBe(200);
      expect(await channelStatusSoon(id, 3)).toBe(3);
      expect((await gw.api('PUT', '/api/channel/', { id, status: 1 })).status).toBe(200);
      ids.push(id);
    }
    await channel(live.url, 'mk-keyless', ['sk-keyless-live-0001'], { priority: 0 });
    const u = await keyedUser(gw);
    for (const id of ids) expect(channelStatus(id)).toBe(1);
    const r = await send(gw, u.key, msg('mk-keyless'));
    expect(r.status).toBe(200);
    expect(dead.seen.length).toBe(0);
    expect(live.seen.length).toBe(1);
  }, 20_000);
});

describe('secrets', () => {
  test('an upstream error echoing a sibling key of the channel is scrubbed of it', async () => {
    const sibling = 'zzsiblingsecret998877';
    const up = keyedUpstream((k) => (k === 'plainfirstsecret112233' ? { error: { status: 400, message: `bad request; account keys: ${sibling}, ${k}` } } : undefined));
    await channel(up.url, 'mk-scrub', ['plainfirstsecret112233', sibling], { key_selection: 'round_robin' });
    const u = await keyedUser(gw);
    const r = await send(gw, u.key, msg('mk-scrub'));
    expect(r.status).toBe(400);
    expect(r.text).toContain('bad request');
    expect(r.text).not.toContain(sibling.slice(0, 10));
    expect(r.text).not.toContain('plainfirstsecret');
  });
});

describe('key administration', () => {
  test('add, list masked, remove; the last key stays; `key` is key 1', async () => {
    const id = await channel('http://127.0.0.1:9', 'mk-admin', ['sk-admin-first-0001']);
    let r = await gw.api('POST', `/api/channel/${id}/keys`, { keys: ['sk-admin-second-0002', 'sk-admin-third-00003'] });
    expect(r.status).toBe(200);
    expect(r.body.data.map((k: any) => k.id)).toEqual([1, 2, 3]);
    expect(JSON.stringify(r.body)).not.toContain('sk-admin-second-0002');
    expect((await gw.api('GET', `/api/channel/${id}`)).body.data).toMatchObject({ key_count: 3, usable_keys: 3, key_selection: 'random' });
    expect((await gw.api('DELETE', `/api/channel/${id}/keys/1`)).status).toBe(200);
    // Key 2 is now the first: the single-key view and the relay's default key follow.
    expect(gw.services.channelRegistry.get(id)!.apiKey).toBe('sk-admin-second-0002');
    r = await gw.api('PUT', '/api/channel/', { id, key: 'sk-admin-replaced-9999' });
    expect(r.status).toBe(200);
    expect(gw.services.channelRegistry.get(id)!.keys.map((k) => [k.id, k.apiKey])).toEqual([[2, 'sk-admin-replaced-9999'], [3, 'sk-admin-third-00003']]);
    expect((await gw.api('DELETE', `/api/channel/${id}/keys/3`)).status).toBe(200);
    r = await gw.api('DELETE', `/api/channel/${id}/keys/2`);
    expect(r.status).toBe(409);
    expect(r.body.error.code).toBe('last_channel_key');
    r = await gw.api('DELETE', `/api/channel/${id}/keys/77`);
    expect(r.status).toBe(404);
    r = await gw.api('POST', `/api/channel/${id}/keys`, { keys: ['bad\nkey'] });
    expect(r.status).toBe(400);
    r = await gw.api('POST', `/api/channel/${id}/keys`, { keys: [] });
    expect(r.status).toBe(400);
    r = await gw.api('GET', `/api/channel/99999/keys`);
    expect(r.status).toBe(404);
  });

  test('bad settings are 400 with the field named', async () => {
    const base = { name: 'bad', type: 'anthropic', base_url: 'http://127.0.0.1:9', key: 'sk-x-1234567', models: ['mk-bad'] };
    for (const [extra, param] of [
      [{ key_selection: 'sticky' }, 'key_selection'],
      [{ failure_rules: { statuses: '600' } }, 'failure_rules.statuses'],
      [{ failure_rules: { statuses: '599-500' } }, 'failure_rules.statuses'],
      [{ failure_rules: { statuses: 'abc' } }, 'failure_rules.statuses'],
      [{ failure_rules: { failures: 5, window_requests: 2 } }, 'failure_rules.window_requests'],
      [{ failure_rules: { failures: 0 } }, 'failure_rules.failures'],
      [{ first_byte_timeout_ms: 5 }, 'first_byte_timeout_ms'],
      [{ probe_interval_ms: 10 }, 'probe_interval_ms'],
    ] as const) {
      const r = await gw.api('POST', '/api/channel/', { ...base, ...extra });
      if (r.status !== 400) throw new Error(`${JSON.stringify(extra)} answered ${r.status}`);
      expect(r.body.error.param).toStartWith(param);
    }
  });
});
