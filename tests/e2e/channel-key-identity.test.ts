/**
 * A key refusal belongs to the key that was refused, not to its id: an operator may replace a channel's keys
 * (PUT /api/channel/ with a new `key`, or removing the key with the highest id and adding one, which takes that
 * id again) while a refusal is on its way. Here the upstream answer or the probe is held while the operator
 * changes the list: the new key must neither be probed nor disabled (nor re-enabled) for the old key's sake.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { anthropicError, startAnthropicUpstream, type UpstreamDouble } from '../doubles/anthropic-upstream';
import { keyedUser, msg, nodeOne, send, setPrice } from './relay-setup';

let gw: TestGateway;
let up: UpstreamDouble;
const seen: string[] = [];
/** Per key: how to answer its n-th request (1-based); absent = a normal reply. */
const plans = new Map<string, (n: number) => Promise<Response | undefined> | Response | undefined>();
/** Refusals the relay recorded (written beside the request): awaited before the key list is checked. */
const refusals: Promise<unknown>[] = [];

beforeAll(async () => {
  // The prober never runs on its own: the tests call probeOnce().
  gw = await startGateway({ RELAY_PROBE_INTERVAL_MS: '3600000' });
  up = startAnthropicUpstream({ maxRecorded: 1000 });
  up.script((req) => {
    const key = req.headers['x-api-key'] ?? '';
    seen.push(key);
    const plan = plans.get(key);
    if (!plan) return {};
    const n = seen.filter((k) => k === key).length;
    return { response: async () => (await plan(n)) ?? reply(String(req.body?.model)) };
  });
  const keys = gw.services.channelKeys as unknown as { autoDisable: (...a: unknown[]) => Promise<unknown> };
  const real = keys.autoDisable.bind(keys);
  keys.autoDisable = (...a) => { const p = real(...a); refusals.push(p.catch(() => {})); return p; };
});
afterAll(async () => { await up.stop(); await gw.stop(); });

/** A gate: `wait` resolves once `open()` is called; `reached` once something waits on it. */
function gate() {
  let open!: () => void;
  let reach!: () => void;
  const opened = new Promise<void>((r) => { open = r; });
  const reached = new Promise<void>((r) => { reach = r; });
  return { open, reached, wait: () => (reach(), opened) };
}

const reply = (model: string) => Response.json({
  id: 'msg_identity', type: 'message', role: 'assistant', model, content: [{ type: 'text', text: 'ok' }], stop_reason: 'end_turn', stop_sequence: null,
  usage: { input_tokens: 1, output_tokens: 1 },
});
const revoked = () => anthropicError(401, 'invalid x-api-key');
let n = 0;
async function channel(keys: string[]): Promise<{ id: number; model: string }> {
  const model = `identity-model-${++n}`;
  await setPrice(gw, model);
  const r = await gw.nodeApi('POST', '/api/channel/', {
    name: model, type: 'anthropic', base_url: up.url, key: keys[0], keys: keys.slice(1), models: [model], timeout_ms: 5000, key_selection: 'round_robin',
  });
  if (r.status !== 200) throw new Error(`channel create: ${r.status} ${JSON.stringify(r.body)}`);
  return { id: r.body.data.id, model };
}
const keysOf = async (id: number) => ((await gw.nodeApi('GET', `/api/channel/${id}/keys`)).body.data as { id: number; key: string; status: number }[])
  .map((k) => [k.id, k.key, k.status]);
/** Node 1 (which serves the requests here) holds this secret among the channel's keys. */
async function nodeOneHas(id: number, secret: string, present = true) {
  for (let i = 0; i < 250; i++) {
    if ((gw.services.channelRegistry.get(id)?.keys.some((k) => k.apiKey === secret) ?? false) === present) return;
    await Bun.sleep(20);
  }
  throw new Error(`node 1 never ${present ? 'loaded' : 'dropped'} the key`);
}
const settled = async () => { await Promise.all(refusals); };

describe('a key refusal is bound to the refused key', () => {
  /**
   * A channel of keys [old, second] (round robin: a request starts with key 1); one request whose old key is
   * refused, with the old key's `holdAt`-th request held until the operator's PUT of `fresh` as key 1 has reached
   * node 1. The request must end served by `second`.
   */
  async function refusedAcrossPut(keys: [string, string], fresh: string, holdAt: number) {
    const { id, model } = await channel(keys);
    const user = await keyedUser(gw);
    const held = gate();
    plans.set(keys[0], async (k) => { if (k === holdAt) await held.wait(); return revoked(); });
    const pending = send(nodeOne(gw), user.key, msg(model));
    await held.reached;
    expect((await gw.nodeApi('PUT', '/api/channel/', { id, key: fresh })).status).toBe(200);
    await nodeOneHas(id, fresh);
    held.open();
    // The old key was refused: the request goes on with the channel's other key.
    expect((await pending).status).toBe(200);
    await settled();
    return { id, model, user };
  }

  test("a refusal answered after the operator's PUT of a new key 1: the new key is neither probed nor disabled", async () => {
    const fresh = 'sk-identity-operator-new-3333';
    // The request's own 401 is held.
    const { id } = await refusedAcrossPut(['sk-identity-old-first-1111', 'sk-identity-second-2222'], fresh, 1);
    expect(seen.filter((k) => k === fresh)).toEqual([]);
    expect(await keysOf(id)).toEqual([[1, 'sk-i…3333', 1], [2, 'sk-i…2222', 1]]);
  }, 20_000);

  test("a refusal confirmed by a probe that ends after the operator's PUT leaves the new key enabled", async () => {
    const fresh = 'sk-identity-operator-new-6666';
    // The request's 401 comes at once; the probe that confirms it (the old key's 2nd request) is held.
    const { id, model, user } = await refusedAcrossPut(['sk-identity-old-first-4444', 'sk-identity-second-5555'], fresh, 2);
    expect(await keysOf(id)).toEqual([[1, 'sk-i…6666', 1], [2, 'sk-i…5555', 1]]);
    expect(seen.filter((k) => k === fresh)).toEqual([]);
    // Nor does the old key's failure count show on it (node 1's counters: it served the request).
    const counters = async () => ((await gw.nodeApi('GET', `/api/channel/${id}/keys`)).body.data as { requests: number; failures: number }[])
      .map((k) => [k.requests, k.failures]);
    expect(await counters()).toEqual([[0, 0], [1, 0]]);
    // And the new key serves (round robin: key 2, then key 1).
    for (let i = 0; i < 2; i++) expect((await send(nodeOne(gw), user.key, msg(model))).status).toBe(200);
    expect(seen.filter((k) => k === fresh)).toEqual([fresh]);
    expect(await counters()).toEqual([[1, 0], [2, 0]]);
  }, 20_000);

  test('the prober re-enables only the key it probed: a new key that took the same id and was refused stays disabled', async () => {
    const first = 'sk-identity-first-7777', old = 'sk-identity-old-second-8888', fresh = 'sk-identity-new-second-9999';
    const { id, model } = await channel([first, old]);
    const user = await keyedUser(gw);
    // Key 2 is refused (its request and the probe), and set aside.
    let oldWorks = false;
    const held = gate();
    plans.set(old, async () => {
      if (!oldWorks) return revoked();
      await held.wait();
      return undefined;
    });
    plans.set(fresh, revoked);
    expect((await send(nodeOne(gw), user.key, msg(model))).status).toBe(200); // key 1
    expect((await send(nodeOne(gw), user.key, msg(model))).status).toBe(200); // key 2 refused, then key 1
    await settled();
    expect(await keysOf(id)).toEqual([[1, 'sk-i…7777', 1], [2, 'sk-i…8888', 3]]);
    // The old key works again; the prober's probe of it is held while the operator replaces it: removed, and a
    // new key added (it takes id 2 again), which the upstream refuses in turn.
    oldWorks = true;
    const probing = gw.services.relay.health.probeOnce();
    await held.reached;
    expect((await gw.nodeApi('DELETE', `/api/channel/${id}/keys/2`)).status).toBe(200);
    expect((await gw.nodeApi('POST', `/api/channel/${id}/keys`, { keys: [fresh] })).status).toBe(200);
    await nodeOneHas(id, fresh);
    expect((await send(nodeOne(gw), user.key, msg(model))).status).toBe(200); // key 1 (round robin)
    expect((await send(nodeOne(gw), user.key, msg(model))).status).toBe(200); // new key 2 refused, then key 1
    await settled();
    expect(await keysOf(id)).toEqual([[1, 'sk-i…7777', 1], [2, 'sk-i…9999', 3]]);
    held.open();
    await probing;
    // The old key's success says nothing of the new one.
    expect(await keysOf(id)).toEqual([[1, 'sk-i…7777', 1], [2, 'sk-i…9999', 3]]);
  }, 20_000);
});

test("a deleted channel's key counters go with it", async () => {
  // Counters were dropped only when a key was removed: a channel created, used and deleted (in a loop, by a script)
  // left up to two entries per key behind for as long as the process ran.
  const node = nodeOne(gw);
  const stats = gw.services.channelKeys.stats;
  const model = `gone-${Date.now()}`;
  const c = await node.api('POST', '/api/channel/', { name: 'gone', type: 'anthropic', base_url: up.url, key: 'k-gone', models: [model], priority: 100 });
  expect(c.status).toBe(200);
  await setPrice(node, model);
  const u = await keyedUser(node);
  const before = stats.size;
  expect((await send(node, u.key, msg(model))).status).toBe(200);
  expect(stats.size).toBe(before + 1);
  expect((await node.api('DELETE', `/api/channel/${c.body.data.id}`)).status).toBe(200);
  expect(stats.size).toBe(before);
});
