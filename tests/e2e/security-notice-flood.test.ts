/**
 * Attack: bury a relay key's widening in a digest flood. The digest lists 50 lines and counts the rest; a thief
 * with a session makes one junk key and widens it over and over (each write lets in one more address), then widens
 * the owner's key, hoping its line is one of those counted. The first line about each key is kept over repeats
 * about one key. Over real HTTP, with a window long enough for the whole burst; all of it sent to one node, since
 * each node gathers its own digest (README: a burst over N nodes is at most N digests).
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { startSmtp, type TestSmtp } from '../helpers/smtp';

let smtp: TestSmtp;
let gw: TestGateway;
beforeAll(async () => {
  smtp = await startSmtp();
  gw = await startGateway({ ...smtp.env, SECURITY_NOTICE_WINDOW_SECONDS: '8' });
}, 30_000);
afterAll(async () => {
  await gw.stop();
  await smtp.stop();
});

test('a junk key widened sixty times does not push the owner\'s key widening out of the digest, nor leave only a harmless first line about it', async () => {
  const email = `${crypto.randomUUID().slice(0, 8)}@example.com`;
  const u = await makeUser(gw, 1, { email });
  const mine = await gw.nodeApi('POST', '/api/token/', { name: 'ci-deploy', allow_ips: ['10.1.0.0/16'], rate_limit_rpm: 60 }, u.token);
  expect(mine.status).toBe(200);
  // That first notice went out at once; what follows within 8 s is one digest.
  await smtp.waitFor((m) => m.to.includes(email), 5_000);
  const junk = await gw.nodeApi('POST', '/api/token/', { name: 'junk', allow_ips: ['192.0.2.255'] }, u.token);
  expect(junk.status).toBe(200);
  // A harmless-looking first widening of the owner's key, so its line is already in the digest.
  expect((await gw.nodeApi('PUT', '/api/token/', { id: mine.body.data.id, rate_limit_rpm: 61 }, u.token)).status).toBe(200);
  // Each write replaces a single address by another: a widening whatever order they land in.
  const flood = await Promise.all(Array.from({ length: 60 }, (_, i) =>
    gw.nodeApi('PUT', '/api/token/', { id: junk.body.data.id, allow_ips: [`192.0.2.${i}`] }, u.token)));
  expect(flood.every((r) => r.status === 200)).toBe(true);
  expect((await gw.nodeApi('PUT', '/api/token/', { id: mine.body.data.id, allow_ips: null }, u.token)).status).toBe(200);

  const digest = await smtp.waitFor((m) => m.to.includes(email) && m.subject.includes('changes to your account'), 15_000);
  expect(digest.subject).toBe('Security notice: 63 changes to your account');
  const lines = digest.text.split('\n').filter((l) => l.startsWith('- '));
  expect(lines).toHaveLength(51);
  expect(lines.at(-1)).toBe('- and 13 more');
  expect(lines.filter((l) => l.startsWith(`- A relay API key was given more reach: "ci-deploy" (id ${mine.body.data.id}); requests per minute: 61 instead of 60`))).toHaveLength(1);
  expect(lines.filter((l) => l.startsWith(`- A relay API key was given more reach: "ci-deploy" (id ${mine.body.data.id}); IP allow-list removed (any address)`))).toHaveLength(1);
  expect(lines.filter((l) => l.includes(`"junk" (id ${junk.body.data.id})`)).length).toBe(48);
}, 40_000);
