/**
 * One group name, created by several requests at once (one node, or several behind a load balancer whose
 * caches have not heard of each other's creation yet): one creation wins, every other gets the 409 a later
 * create gets, never a 500 from the database's unique index.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startGateway();
});
afterAll(async () => {
  await gw.stop();
});

describe('creating a group', () => {
  test('8 concurrent creates of one name: one 200, seven 409 group_exists; the group exists once', async () => {
    const rs = await Promise.all(Array.from({ length: 8 }, (_, i) => gw.api('POST', '/api/group/', { name: 'raced', ratio: 1000 + i })));
    const codes = rs.map((r) => [r.status, r.body.error?.code ?? null]).sort();
    expect(codes).toEqual([[200, null], ...Array(7).fill([409, 'group_exists'])]);
    const list = await gw.api('GET', '/api/group/');
    expect(list.body.data.filter((g: { name: string }) => g.name === 'raced')).toHaveLength(1);
  }, 15_000);
});
