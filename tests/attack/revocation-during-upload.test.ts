/**
 * Attack: authenticate with a key, then keep the request body uploading while the key (or its owner) is
 * revoked, hoping the check made before the body was read still counts. The key record is looked up
 * before the body (front door) but its status and owner are checked again once the body is in, so the
 * request is refused and never reaches the upstream. Real gateway, raw socket for the split body.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { rawHttp, rawJson } from '../helpers/raw-http';
import { addChannel, keyedUser, msg, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let a: Scripted;

beforeAll(async () => {
  gw = await startGateway();
  a = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: a.url, models: ['claude-x'] });
  await setPrice(gw, 'claude-x');
});
afterAll(async () => {
  await a.stop();
  await gw.stop();
});

type User = Awaited<ReturnType<typeof keyedUser>>;
const REVOKE: Array<[string, (u: User) => Promise<{ status: number }>, string]> = [
  ['key disabled', (u) => gw.api('PUT', '/api/token/', { id: u.keyId, status: 2 }, u.token), 'api_key_revoked'],
  ['key deleted', (u) => gw.api('DELETE', `/api/token/${u.keyId}`, undefined, u.token), 'api_key_revoked'],
  ['owner disabled', (u) => gw.api('POST', `/api/user/${u.id}/disable`, {}), 'user_disabled'],
  ['owner deleted', (u) => gw.api('DELETE', `/api/user/${u.id}`), 'user_disabled'],
];

describe('a credential revoked while its request body is still arriving', () => {
  for (const [what, revoke, code] of REVOKE) {
    test(`${what}: 401 ${code} once the body is in, nothing sent upstream, nothing billed`, async () => {
      const u = await keyedUser(gw, 10_000_000);
      const body = JSON.stringify(msg('claude-x'));
      const half = Math.floor(body.length / 2);
      const hits = a.hits;
      const head = `POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nvendor-version: 2023-06-01\r\nx-api-key: ${u.key}\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body.slice(0, half)}`;
      // The second half is sent 300 ms later; the revocation lands in between.
      const exchange = rawHttp(gw.url, head, { chunks: [body.slice(half)], intervalMs: 300, waitMs: 3000 });
      await Bun.sleep(60);
      expect((await revoke(u)).status).toBe(200);
      const r = await exchange;
      expect(r.status).toBe(401);
      expect(rawJson(r)?.error?.code).toBe(code);
      expect(a.hits).toBe(hits);
      gw.services.relay.quota.flush();
      expect(await gw.services.ledger.sum(u.id)).toBe(10_000_000);
    });
  }
});
