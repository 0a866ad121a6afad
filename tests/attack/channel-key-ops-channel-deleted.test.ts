/**
 * Key operations racing the deletion of their channel: an operator removes, disables or adds a key while another
 * deletes the channel. The key list's write went through, then the channel was gone when its status was settled,
 * and the route answered 500 `internal_error` (a TypeError reading the missing row; PostgreSQL, where the two
 * interleave). The write that went through answers as it would have just before the delete, the others 404
 * `channel_not_found`.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

test('key operations racing the deletion of their channel: 200 or 404 channel_not_found, never a 5xx', async () => {
  const answers: string[] = [];
  for (let i = 0; i < 30; i++) {
    const c = await gw.api('POST', '/api/channel/', { name: `c${i}`, type: 'anthropic', base_url: 'http://127.0.0.1:9', key: 'k1', keys: ['k2'], models: ['m'] });
    expect(c.status).toBe(200);
    const id = c.body.data.id;
    const [removed, disabled, added, deleted] = await Promise.all([
      gw.api('DELETE', `/api/channel/${id}/keys/2`),
      gw.api('POST', `/api/channel/${id}/keys/1/disable`),
      gw.api('POST', `/api/channel/${id}/keys`, { keys: ['k3'] }),
      gw.api('DELETE', `/api/channel/${id}`),
    ]);
    expect(deleted.status).toBe(200);
    for (const r of [removed, disabled, added]) answers.push(`${r.status} ${r.body.error?.code ?? ''}`.trim());
  }
  expect(answers.filter((a) => a !== '200' && a !== '404 channel_not_found')).toEqual([]);
  expect(gw.logs.filter((l) => l.includes('request.bug'))).toEqual([]);
});
