import { expect, test } from 'bun:test';
import type { Logger } from '@gw/core';
import type { MailMessage, Mailer } from './mailer';
import { SecurityNotices } from './security-notices';

const quiet: Logger = { debug() {}, info() {}, warn() {}, error() {} };

function fakeMailer(fail = 0) {
  const sent: MailMessage[] = [];
  let failures = fail;
  const mailer = {
    configured: true,
    async send(m: MailMessage) {
      if (failures-- > 0) throw new Error('smtp down');
      sent.push(m);
      return true;
    },
  } as unknown as Mailer;
  return { mailer, sent };
}

const user = { id: 7, username: 'ann', email: 'ann@example.com' };

test('a flood is one mail and one digest of at most 50 lines that counts the rest', async () => {
  const { mailer, sent } = fakeMailer();
  // A window long enough that a loaded machine still sends the first mail before it ends (50 ms was not).
  const n = new SecurityNotices(mailer, { enabled: true, windowMs: 1_000, publicUrl: 'https://gw' }, quiet);
  for (let i = 0; i < 1_000; i++) n.notify(user, { kind: 'relay_key_created', detail: `k${i}` });
  await n.idle();
  expect(sent).toHaveLength(1);
  await Bun.sleep(1_200);
  await n.idle();
  expect(sent).toHaveLength(2);
  expect(sent[1]!.subject).toBe('Security notice: 999 changes to your account');
  const lines = sent[1]!.text.split('\n').filter((l) => l.startsWith('- '));
  expect(lines).toHaveLength(51);
  expect(lines[50]).toBe('- and 949 more');
  n.stop();
});

test('a failed delivery is retried; stop() ends the window and the queue', async () => {
  const { mailer, sent } = fakeMailer(1);
  const n = new SecurityNotices(mailer, { enabled: true, windowMs: 10_000, publicUrl: 'https://gw' }, quiet, Date.now, { retryDelaysMs: [10] });
  n.notify(user, { kind: 'password_changed' });
  await Bun.sleep(50);
  await n.idle();
  expect(sent).toHaveLength(1);
  n.notify(user, { kind: 'two_factor_disabled' });
  n.stop();
  await Bun.sleep(20);
  expect(sent).toHaveLength(1);
});

test('disabled, or no address, or mail not configured: nothing is queued', async () => {
  const { mailer, sent } = fakeMailer();
  const off = new SecurityNotices(mailer, { enabled: false, windowMs: 10, publicUrl: 'x' }, quiet);
  off.notify(user, { kind: 'password_changed' });
  const on = new SecurityNotices(mailer, { enabled: true, windowMs: 10, publicUrl: 'x' }, quiet);
  on.notify({ ...user, email: null }, { kind: 'password_changed' });
  const unconfigured = new SecurityNotices({ configured: false } as unknown as Mailer, { enabled: true, windowMs: 10, publicUrl: 'x' }, quiet);
  unconfigured.notify(user, { kind: 'password_changed' });
  await Bun.sleep(30);
  expect(sent).toEqual([]);
  for (const s of [off, on, unconfigured]) s.stop();
});
