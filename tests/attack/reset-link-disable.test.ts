/**
 * An admin disables an account that looks taken over: its sessions end and its keys stop. A password-reset link
 * mailed before (to a mailbox the intruder may read: often how the account was taken) was only refused while the
 * account stayed disabled; once the admin re-enabled it, for the owner to log in again, the old link set a password
 * of the intruder's choosing. Disabling voids pending reset links, as a password change or a new address does.
 * Over real HTTP, against a real SMTP server, on every backend.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { holdWrites, whileHeld } from '../helpers/hold-writes';
import { startSmtp, type TestSmtp } from '../helpers/smtp';

let smtp: TestSmtp;
let gw: TestGateway;
beforeAll(async () => {
  smtp = await startSmtp();
  gw = await startGateway({ ...smtp.env, RESET_IP_PER_MINUTE: '1000' });
}, 30_000);
afterAll(async () => {
  await gw.stop();
  await smtp.stop();
});

async function mailedToken(email: string): Promise<string> {
  const after = smtp.messages.length;
  expect((await gw.api('POST', '/api/user/reset/request', { email }, null)).status).toBe(200);
  const m = await smtp.waitFor((x) => smtp.messages.indexOf(x) >= after && x.to.includes(email) && x.subject === 'Reset your password');
  return /[?&]token=([A-Za-z0-9]+)/.exec(m.text)![1]!;
}

const reset = (email: string, token: string) => gw.api('POST', '/api/user/reset', { email, token, password: 'intruder-chosen-1' }, null);
const login = (username: string, password: string) => gw.api('POST', '/api/user/login', { username, password }, null);

test.each([
  ['POST /api/user/:id/disable', (id: number) => gw.api('POST', `/api/user/${id}/disable`)],
  ['PUT /api/user/ status 2', (id: number) => gw.api('PUT', '/api/user/', { id, status: 2 })],
] as const)('a link mailed before %s does not work once the account is enabled again', async (_how, disable) => {
  const email = `d${crypto.randomUUID().slice(0, 8)}@example.com`;
  const u = await makeUser(gw, 1, { email });
  const token = await mailedToken(email);
  expect((await disable(u.id)).status).toBe(200);
  // Refused while disabled (as before).
  expect([(await reset(email, token)).status]).toEqual([400]);
  expect((await gw.api('POST', `/api/user/${u.id}/enable`)).status).toBe(200);
  const r = await reset(email, token);
  expect([r.status, r.body.error?.code]).toEqual([400, 'invalid_reset_token']);
  // The owner's password still opens the account; the intruder's does not.
  expect((await login(u.username, 'intruder-chosen-1')).status).toBe(401);
  expect((await login(u.username, u.password)).status).toBe(200);
  // A link asked for after the re-enabling works.
  const fresh = await mailedToken(email);
  expect((await gw.api('POST', '/api/user/reset', { email, token: fresh, password: 'owner-recovered-1' }, null)).status).toBe(200);
}, 30_000);

test('a disable landing while a requested link is being written leaves no link: nothing mailed, none stored', async () => {
  const email = `r${crypto.randomUUID().slice(0, 8)}@example.com`;
  const u = await makeUser(gw, 1, { email });
  const before = smtp.messages.length;
  // The lookup saw the account enabled; the disable lands before the token is written (the throttle awaits between).
  const hold = holdWrites(gw.services.security, 'createResetToken', ([id]) => id === u.id);
  const r = await whileHeld(hold, () => gw.api('POST', '/api/user/reset/request', { email }, null),
    async () => { expect((await gw.api('POST', `/api/user/${u.id}/disable`)).status).toBe(200); });
  expect(r.status).toBe(200);
  await gw.services.passwordReset.idle();
  expect(await gw.db.get(`select count(*) as n from password_resets where user_id = ${u.id}`)).toEqual({ n: 0 });
  expect(smtp.messages.slice(before).filter((m) => m.to.includes(email))).toEqual([]);
}, 30_000);

test('a disable landing between a reset\'s checks and its write: the password is not set', async () => {
  const email = `s${crypto.randomUUID().slice(0, 8)}@example.com`;
  const u = await makeUser(gw, 1, { email });
  const token = await mailedToken(email);
  const hold = holdWrites(gw.services.security, 'resetPassword', ([id]) => id === u.id);
  const r = await whileHeld(hold, () => reset(email, token),
    async () => { expect((await gw.api('POST', `/api/user/${u.id}/disable`)).status).toBe(200); });
  expect([r.status, r.body.error?.code]).toEqual([400, 'invalid_reset_token']);
  expect((await gw.api('POST', `/api/user/${u.id}/enable`)).status).toBe(200);
  expect((await login(u.username, 'intruder-chosen-1')).status).toBe(401);
  expect((await login(u.username, u.password)).status).toBe(200);
}, 30_000);

test.each([
  ['the owner changes the password', (u: { id: number; token: string; password: string }) =>
    gw.api('POST', '/api/user/password', { current_password: u.password, new_password: 'owner-new-pass-1' }, u.token)],
  ['an admin sets the password', (u: { id: number }) => gw.api('PUT', '/api/user/', { id: u.id, password: 'admin-set-pass-1' })],
  ['an admin moves the address', (u: { id: number }) => gw.api('PUT', '/api/user/', { id: u.id, email: `moved-${u.id}@example.com` })],
] as const)('%s while a requested link is being written: no link is left behind it, nothing mailed', async (_how, change) => {
  // The request was looked up against the account before the change; the change voided pending links (none yet),
  // and the token write came after it: a link based on the state the owner had just replaced.
  const email = `p${crypto.randomUUID().slice(0, 8)}@example.com`;
  const u = await makeUser(gw, 1, { email });
  const before = smtp.messages.length;
  const hold = holdWrites(gw.services.security, 'createResetToken', ([id]) => id === u.id);
  const r = await whileHeld(hold, () => gw.api('POST', '/api/user/reset/request', { email }, null),
    async () => { expect((await change(u)).status).toBe(200); });
  expect(r.status).toBe(200);
  await gw.services.passwordReset.idle();
  expect(await gw.db.get(`select count(*) as n from password_resets where user_id = ${u.id}`)).toEqual({ n: 0 });
  // (The change's own security notice goes out; no reset e-mail does.)
  expect(smtp.messages.slice(before).filter((m) => m.to.includes(email) && m.subject === 'Reset your password')).toEqual([]);
  // A link asked for after the change is written and mailed as usual (to the address the account has now).
  const now = (await gw.api('GET', `/api/user/${u.id}`)).body.data.email;
  expect(await mailedToken(now)).toMatch(/^[A-Za-z0-9]+$/);
}, 30_000);
