/**
 * PUT /api/channel/ is a partial update: a field the request does not name must keep whatever is stored when the
 * write lands, not what the service read before it. Each PUT here is held between its read of the row and its
 * write while another PUT changing other fields commits; both changes must survive, in the database and in the
 * routing registry.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { holdNextRead } from '../helpers/hold-read';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway({ RELAY_PROBE_INTERVAL_MS: '3600000' }); }, 30_000);
afterAll(async () => { await gw.stop(); }, 30_000);

let n = 0;
async function channel(): Promise<number> {
  const r = await gw.nodeApi('POST', '/api/channel/', {
    name: `put-race-${++n}`, type: 'anthropic', base_url: 'http://127.0.0.1:9/first', key: 'sk-put-race-key-0001', models: [`put-race-${n}`],
  });
  if (r.status !== 200) throw new Error(`channel create: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.data.id;
}

/** `first` is held after its read while `second` commits, then released; both answers. */
async function interleave(first: () => Promise<any>, second: () => Promise<any>) {
  const held = holdNextRead(gw.services.channels);
  const a = first();
  await held.read;
  const b = await second();
  held.release();
  return [await a, b];
}

describe('PUT /api/channel/ under a concurrent PUT of other fields', () => {
  test('priority held while weight and models commit: all three stand', async () => {
    const id = await channel();
    const [a, b] = await interleave(
      () => gw.nodeApi('PUT', '/api/channel/', { id, priority: 5 }),
      () => gw.nodeApi('PUT', '/api/channel/', { id, weight: 7, models: ['put-race-other'] }),
    );
    expect([a.status, b.status]).toEqual([200, 200]);
    const stored = (await gw.nodeApi('GET', `/api/channel/${id}`)).body.data;
    expect([stored.priority, stored.weight, stored.models]).toEqual([5, 7, ['put-race-other']]);
    // The answer of the later write is the whole row as written, the other PUT's change included.
    expect([a.body.data.priority, a.body.data.weight]).toEqual([5, 7]);
    const rec = gw.services.channelRegistry.get(id)!;
    expect([rec.priority, rec.weight, rec.models]).toEqual([5, 7, ['put-race-other']]);
  }, 20_000);

  test("an admin's PUT naming the base_url it read does not move the channel back after root moved it", async () => {
    const id = await channel();
    const admin = await makeUser(gw, 10);
    const [a, b] = await interleave(
      // A form sent whole: the base_url as read, unchanged, with the field the admin edits.
      () => gw.nodeApi('PUT', '/api/channel/', { id, base_url: 'http://127.0.0.1:9/first', priority: 3 }, admin.token),
      () => gw.nodeApi('PUT', '/api/channel/', { id, base_url: 'http://127.0.0.1:9/second' }),
    );
    expect(b.status).toBe(200);
    expect(a.status).toBe(200);
    const stored = (await gw.nodeApi('GET', `/api/channel/${id}`)).body.data;
    expect([stored.base_url, stored.priority]).toEqual(['http://127.0.0.1:9/second', 3]);
    expect(gw.services.channelRegistry.get(id)!.baseUrl).toBe('http://127.0.0.1:9/second');
  }, 20_000);

  test('headers sent back masked (kept) while another PUT rotates that secret: the rotation stands', async () => {
    const id = await channel();
    const old = 'tok-old-secret-value-000001';
    expect((await gw.nodeApi('PUT', '/api/channel/', { id, headers: { 'x-org': 'o1', 'x-upstream-token': old } })).status).toBe(200);
    const masked = (await gw.nodeApi('GET', `/api/channel/${id}`)).body.data.headers['x-upstream-token'];
    const [a, b] = await interleave(
      // A form sent whole: x-org edited, the token as the API showed it (masked: keep it).
      () => gw.nodeApi('PUT', '/api/channel/', { id, headers: { 'x-org': 'o2', 'x-upstream-token': masked } }),
      () => gw.nodeApi('PUT', '/api/channel/', { id, headers: { 'x-org': 'o1', 'x-upstream-token': 'tok-new-secret-value-000002' } }),
    );
    expect(b.status).toBe(200);
    // The masked value no longer names what is stored: refused, nothing written (the old secret is not restored).
    expect([a.status, a.body.error?.code, a.body.error?.param]).toEqual([409, 'masked_header_stale', 'headers.x-upstream-token']);
    expect(gw.services.channelRegistry.get(id)!.headers).toEqual({ 'x-org': 'o1', 'x-upstream-token': 'tok-new-secret-value-000002' });
  }, 20_000);

  test('a masked header value from an older read is refused, never stored as the secret', async () => {
    const id = await channel();
    expect((await gw.nodeApi('PUT', '/api/channel/', { id, headers: { 'x-upstream-token': 'tok-old-secret-value-000001' } })).status).toBe(200);
    const masked = (await gw.nodeApi('GET', `/api/channel/${id}`)).body.data.headers['x-upstream-token'];
    expect((await gw.nodeApi('PUT', '/api/channel/', { id, headers: { 'x-upstream-token': 'tok-new-secret-value-000002' } })).status).toBe(200);
    const r = await gw.nodeApi('PUT', '/api/channel/', { id, headers: { 'x-upstream-token': masked } });
    expect([r.status, r.body.error?.code]).toEqual([409, 'masked_header_stale']);
    expect(gw.services.channelRegistry.get(id)!.headers).toEqual({ 'x-upstream-token': 'tok-new-secret-value-000002' });
    // The current masked value still keeps it.
    const now = (await gw.nodeApi('GET', `/api/channel/${id}`)).body.data.headers['x-upstream-token'];
    expect((await gw.nodeApi('PUT', '/api/channel/', { id, headers: { 'x-upstream-token': now, 'x-org': 'o3' } })).status).toBe(200);
    expect(gw.services.channelRegistry.get(id)!.headers).toEqual({ 'x-upstream-token': 'tok-new-secret-value-000002', 'x-org': 'o3' });
  }, 20_000);
});
