/**
 * A graceful stop sends the mail it holds: the security-notice digest gathered so far (before, a restart inside a
 * window swallowed every line gathered in it, such as a thief's key made right after the owner's own) and the
 * reset e-mails still queued (before, dropped: only the one on the wire went out). Real gateway, real SMTP server.
 * Every request goes to the node in this process, whose graceful stop is the one tested (with GW_TEST_CLUSTER the
 * other nodes are killed at the stop, their mail lost like any killed process's).
 */
import { afterAll, expect, test } from 'bun:test';
import { makeUser, startGateway } from '../helpers/gateway';
import { startSmtp, type TestSmtp } from '../helpers/smtp';

const servers: TestSmtp[] = [];
afterAll(async () => { for (const s of servers) await s.stop(); });

test('a graceful stop inside a notice window sends the digest gathered so far', async () => {
  const smtp = await startSmtp();
  servers.push(smtp);
  // A window far longer than the test: before, its digest went out only at its end, so never.
  const gw = await startGateway({ ...smtp.env, SECURITY_NOTICE_WINDOW_SECONDS: '600' });
  const email = `${crypto.randomUUID().slice(0, 8)}@example.com`;
  const u = await makeUser(gw, 1, { email });
  const keyId = async (name: string) => {
    // To this process's node: the mail is its own (with 3 nodes, the others are killed at the test's stop).
    const res = await gw.nodeApi('POST', '/api/token/', { name }, u.token);
    expect(res.status).toBe(200);
    return res.body.data.id as number;
  };
  const mine = await keyId('mine');
  const first = await smtp.waitFor((m) => m.to.includes(email), 5_000);
  expect(first.text).toContain(`"mine" (id ${mine})`);
  const thief = await keyId('thief');
  await Bun.sleep(300);
  expect(smtp.messages.filter((m) => m.to.includes(email)).length).toBe(1);
  await gw.stop();
  const digest = smtp.messages.filter((m) => m.to.includes(email)).at(-1)!;
  expect(digest.text).toContain(`"thief" (id ${thief})`);
}, 30_000);

test('a graceful stop lets queued reset e-mails go out to a slow mail server', async () => {
  // Each message is acknowledged 300 ms after it arrived: the first is on the wire while the others wait in the queue.
  const smtp = await startSmtp(undefined, { delayMs: 300 });
  servers.push(smtp);
  const gw = await startGateway({ ...smtp.env, RESET_IP_PER_MINUTE: '1000' });
  const emails: string[] = [];
  for (let i = 0; i < 3; i++) {
    const email = `${crypto.randomUUID().slice(0, 8)}@example.com`;
    await makeUser(gw, 1, { email });
    emails.push(email);
  }
  for (const email of emails) expect((await gw.nodeApi('POST', '/api/user/reset/request', { email }, null)).status).toBe(200);
  const started = performance.now();
  await gw.stop();
  const ms = performance.now() - started;
  for (const email of emails) expect(smtp.messages.some((m) => m.to.includes(email))).toBe(true);
  // Bounded by the mail itself (3 × 300 ms and connections), far under the 5 s grace.
  expect(ms).toBeLessThan(4_000);
}, 30_000);
