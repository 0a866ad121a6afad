/**
 * Attack: exceed MAX_KEYS_PER_USER by creating keys concurrently (the count-then-insert race). Real
 * gateway, 40 parallel POST /api/token/ from one low-privilege user with an access token.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway({ MAX_KEYS_PER_USER: '5' }); });
afterAll(async () => { await gw.stop(); });

test('40 concurrent creates with a cap of 5: exactly 5 keys, 35 × 409 too_many_keys, and the cap still holds after deletes', async () => {
  const u = await makeUser(gw);
  const rs = await Promise.all(Array.from({ length: 40 }, (_, i) => gw.api('POST', '/api/token/', { name: `k${i}` }, u.token)));
  const counts = new Map<string, number>();
  for (const r of rs) {
    const k = r.status === 200 ? '200' : `${r.status} ${r.body?.error?.code}`;
    counts.set(k, (counts.get(k) ?? 0) + 1);
  }
  expect(Object.fromEntries(counts)).toEqual({ '200': 5, '409 too_many_keys': 35 });
  const list = await gw.api('GET', '/api/token/?page_size=100', undefined, u.token);
  expect(list.body.data.total).toBe(5);
  // Freeing one slot lets exactly one more in, even when 10 race for it.
  const victim = rs.find((r) => r.status === 200)!.body.data.id;
  expect((await gw.api('DELETE', `/api/token/${victim}`, undefined, u.token)).status).toBe(200);
  const again = await Promise.all(Array.from({ length: 10 }, () => gw.api('POST', '/api/token/', { name: 'again' }, u.token)));
  expect(again.filter((r) => r.status === 200).length).toBe(1);
  expect((await gw.api('GET', '/api/token/?page_size=100', undefined, u.token)).body.data.total).toBe(5);
});
