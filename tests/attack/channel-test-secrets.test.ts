/**
 * An admin below root never sees a channel's keys (every read masks them). The channel test showed the upstream's
 * error text scrubbed of the one key it sent, but not of the channel's other keys: an upstream echoing its account's
 * keys (a proxy's debug text, a provider listing the keys it knows) handed the admin a sibling key in clear. The
 * relay's own scrubber has covered every key of the channel; the test now uses the same set.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { startAnthropicUpstream, type UpstreamDouble } from '../doubles/anthropic-upstream';

let gw: TestGateway;
let up: UpstreamDouble;
beforeAll(async () => {
  gw = await startGateway({});
  up = startAnthropicUpstream({});
});
afterAll(async () => { await up.stop(); await gw.stop(); });

test("a channel test's message never shows any key of the channel, the one sent or its siblings", async () => {
  const first = 'plainfirstsecret445566';
  const sibling = 'zzsiblingsecret554433';
  up.script((req) => ({ error: { status: 400, message: `bad request; account keys: ${sibling}, ${req.headers['x-api-key']}` } }));
  const admin = await makeUser(gw, 10);
  const made = await gw.api('POST', '/api/channel/', { name: 'sib', type: 'anthropic', base_url: up.url, key: first, keys: [sibling], models: ['sib-model'] }, admin.token);
  expect(made.status).toBe(200);
  const r = await gw.api('POST', `/api/channel/${made.body.data.id}/test`, undefined, admin.token);
  expect(r.status).toBe(200);
  expect([r.body.data.success, r.body.data.status]).toEqual([false, 400]);
  expect(r.body.data.message).toContain('bad request; account keys:');
  expect(r.body.data.message).not.toContain(sibling.slice(0, 10));
  expect(r.body.data.message).not.toContain(first.slice(0, 10));
});
