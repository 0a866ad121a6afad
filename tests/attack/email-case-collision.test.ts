/**
 * E-mail addresses are looked up ignoring ASCII case (a reset request for ALICE@example.com reaches alice@example.com),
 * and a second account may not take an address another holds in any case (409 email_taken). That check reads before
 * the write: requests setting case variants of one address at once all passed it, and the database's unique index
 * (exact spelling) let every one in. Two accounts then shared one reset address: a reset for it found only one of
 * them (whichever the database returned), the other could never be recovered by e-mail. Over real HTTP, on every backend.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startGateway();
}, 30_000);
afterAll(async () => {
  await gw.stop();
});

/** Four spellings of one address that differ only in ASCII case. */
const variants = (local: string) => [local, local.toUpperCase(), `${local[0]!.toUpperCase()}${local.slice(1)}`, `${local.slice(0, -1)}${local.slice(-1).toUpperCase()}`]
  .map((l) => `${l}@example.com`);

const sharing = async (email: string) => (await gw.db.all('select id from users where lower(email) = lower(?)', email)).length;

test('case variants of one address created at once: one 200, the rest 409 email_taken; one account holds it', async () => {
  const local = `case-${crypto.randomUUID().slice(0, 8)}x`;
  const emails = variants(local);
  const rs = await Promise.all(emails.map((email, i) => gw.api('POST', '/api/user/', { username: `ec${i}-${local.slice(5, 13)}`, password: 'race-password-1', email })));
  expect(rs.map((r) => [r.status, r.body.error?.code ?? null]).sort()).toEqual([[200, null], ...Array(emails.length - 1).fill([409, 'email_taken'])]);
  expect(await sharing(emails[0]!)).toBe(1);
}, 20_000);

test('case variants set by several users on themselves at once: one 200, the rest 409 email_taken', async () => {
  const local = `self-${crypto.randomUUID().slice(0, 8)}x`;
  const emails = variants(local);
  const users = await Promise.all(emails.map(() => makeUser(gw, 1)));
  const rs = await Promise.all(users.map((u, i) => gw.api('PUT', '/api/user/self', { email: emails[i], current_password: u.password }, u.token)));
  expect(rs.map((r) => [r.status, r.body.error?.code ?? null]).sort()).toEqual([[200, null], ...Array(emails.length - 1).fill([409, 'email_taken'])]);
  expect(await sharing(emails[0]!)).toBe(1);
}, 20_000);

test('case variants set by an admin on several users at once: one 200, the rest 409 email_taken', async () => {
  const local = `adm-${crypto.randomUUID().slice(0, 8)}x`;
  const emails = variants(local);
  const users = await Promise.all(emails.map(() => makeUser(gw, 1)));
  const rs = await Promise.all(users.map((u, i) => gw.api('PUT', '/api/user/', { id: u.id, email: emails[i] })));
  expect(rs.map((r) => [r.status, r.body.error?.code ?? null]).sort()).toEqual([[200, null], ...Array(emails.length - 1).fill([409, 'email_taken'])]);
  expect(await sharing(emails[0]!)).toBe(1);
}, 20_000);
