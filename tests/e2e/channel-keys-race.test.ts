/**
 * A channel's key list under concurrent writers: an automatic change (a refused key set aside, the prober
 * bringing one back) and an operator's edit (PUT /api/channel/:id with a new `key`, DELETE of a key) each read
 * the list and write it back. Each writer here is held between its read and its write while the other commits;
 * neither may undo the other: the operator's new key survives, a removed key stays removed, and a refusal of a
 * key the operator has since replaced does not touch the new one.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { holdNextRead } from '../helpers/hold-read';
import { startAnthropicUpstream, type UpstreamDouble } from '../doubles/anthropic-upstream';
import { keyedUser, msg, nodeOne, send, setPrice } from './relay-setup';

let gw: TestGateway;
let upstreamDouble: UpstreamDouble;
const seen: string[] = [];
beforeAll(async () => {
  gw = await startGateway({ RELAY_PROBE_INTERVAL_MS: '3600000' });
  upstreamDouble = startAnthropicUpstream({ maxRecorded: 100 });
  upstreamDouble.script((req) => { seen.push(req.headers['x-api-key'] ?? ''); return {}; });
});
afterAll(async () => { await upstreamDouble.stop(); await gw.stop(); });

let n = 0;
async function channel(keys: string[]): Promise<number> {
  const model = `race-model-${++n}`;
  await setPrice(gw, model);
  const r = await gw.nodeApi('POST', '/api/channel/', {
    name: model, type: 'anthropic', base_url: upstreamDouble.url, key: keys[0], keys: keys.slice(1), models: [model], timeout_ms: 5000,
  });
  if (r.status !== 200) throw new Error(`channel create: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.data.id;
}
/** A key as node 1 holds it (the KeyRef a refusal names), once node 1 has loaded the channel. */
async function keyRef(id: number, keyId: number) {
  for (let i = 0; i < 250; i++) {
    const k = gw.services.channelRegistry.get(id)?.keys.find((e) => e.id === keyId);
    if (k) return { id: k.id, fingerprint: k.fingerprint };
    await Bun.sleep(20);
  }
  throw new Error(`node 1 never loaded key ${keyId} of channel ${id}`);
}
const keysOf = async (id: number) => (await gw.nodeApi('GET', `/api/channel/${id}/keys`)).body.data as { id: number; key: string; status: number }[];
/** The key the upstream receives for one request on the channel's model (every other key is unusable). */
async function keyUsed(model: string, user: { key: string }): Promise<string> {
  const before = seen.length;
  const r = await send(nodeOne(gw), user.key, msg(model));
  expect(r.status).toBe(200);
  return seen.slice(before).at(-1)!;
}

describe('channel key list: concurrent automatic and operator writes', () => {
  test("a refusal read before the operator's PUT of a new key does not write the old key back", async () => {
    const id = await channel(['sk-race-key-old-first-1111', 'sk-race-key-second-2222']);
    const user = await keyedUser(gw);
    const second = await keyRef(id, 2);
    const held = holdNextRead(gw.services.channelKeys);
    const refusal = gw.services.channelKeys.autoDisable(id, second, 'upstream 401: invalid key');
    await held.read;
    const put = await gw.nodeApi('PUT', '/api/channel/', { id, key: 'sk-race-key-operator-new-9999' });
    expect(put.status).toBe(200);
    held.release();
    await refusal;
    const keys = await keysOf(id);
    // The operator's key stands (enabled), and the refusal of key 2 still applies.
    expect(keys.map((k) => [k.id, k.key, k.status])).toEqual([[1, 'sk-r…9999', 1], [2, 'sk-r…2222', 3]]);
    expect(await keyUsed(`race-model-${n}`, user)).toBe('sk-race-key-operator-new-9999');
  }, 20_000);

  test('a refusal of a key the operator has since replaced leaves the new key enabled', async () => {
    const id = await channel(['sk-race-key-old-first-3333', 'sk-race-key-second-4444']);
    const first = await keyRef(id, 1);
    const held = holdNextRead(gw.services.channelKeys);
    const refusal = gw.services.channelKeys.autoDisable(id, first, 'upstream 401: invalid key');
    await held.read;
    expect((await gw.nodeApi('PUT', '/api/channel/', { id, key: 'sk-race-key-operator-new-5555' })).status).toBe(200);
    held.release();
    await refusal;
    expect((await keysOf(id)).map((k) => [k.id, k.key, k.status])).toEqual([[1, 'sk-r…5555', 1], [2, 'sk-r…4444', 1]]);
  }, 20_000);

  test('a PUT read before a key was removed (or refused) does not bring it back', async () => {
    const id = await channel(['sk-race-key-first-6666', 'sk-race-key-second-7777', 'sk-race-key-third-8888']);
    const third = await keyRef(id, 3);
    const held = holdNextRead(gw.services.channels);
    const put = gw.nodeApi('PUT', '/api/channel/', { id, key: 'sk-race-key-operator-new-0000' });
    await held.read;
    expect((await gw.nodeApi('DELETE', `/api/channel/${id}/keys/2`)).status).toBe(200);
    await gw.services.channelKeys.autoDisable(id, third, 'upstream 402: payment required');
    held.release();
    expect((await put).status).toBe(200);
    expect((await keysOf(id)).map((k) => [k.id, k.key, k.status])).toEqual([[1, 'sk-r…0000', 1], [3, 'sk-r…8888', 3]]);
  }, 20_000);
});
