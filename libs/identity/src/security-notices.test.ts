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

test('a flood cannot push a key\'s first line out of the digest: repeats about one key, then new keys, give way first', async () => {
  const { mailer, sent } = fakeMailer();
  const n = new SecurityNotices(mailer, { enabled: true, windowMs: 1_000, publicUrl: 'https://gw' }, quiet);
  n.notify(user, { kind: 'relay_key_created', detail: '"junk" (id 2)', subject: 'relay key 2' });
  // One junk key widened over and over (raise its limit by one each time) to fill the digest...
  for (let i = 0; i < 60; i++) n.notify(user, { kind: 'relay_key_widened', detail: `"junk" (id 2); requests per minute: ${i + 2} instead of ${i + 1}`, subject: 'relay key 2' });
  // ...and fifty more keys made, before the owner's own key is widened.
  for (let i = 0; i < 50; i++) n.notify(user, { kind: 'relay_key_created', detail: `"junk" (id ${100 + i})`, subject: `relay key ${100 + i}` });
  n.notify(user, { kind: 'relay_key_widened', detail: '"ci-deploy" (id 1); IP allow-list removed (any address)', subject: 'relay key 1' });
  n.notify(user, { kind: 'two_factor_disabled' });
  await Bun.sleep(1_200);
  await n.idle();
  expect(sent).toHaveLength(2);
  expect(sent[1]!.subject).toBe('Security notice: 112 changes to your account');
  const lines = sent[1]!.text.split('\n').filter((l) => l.startsWith('- '));
  expect(lines).toHaveLength(51);
  expect(lines[50]).toBe('- and 62 more');
  expect(lines.filter((l) => l.includes('"ci-deploy" (id 1); IP allow-list removed'))).toHaveLength(1);
  expect(lines.filter((l) => l.startsWith('- Two-factor authentication was turned off'))).toHaveLength(1);
  // The junk key keeps its first widening; later lines stay in order.
  expect(lines[0]).toStartWith('- A relay API key was given more reach: "junk" (id 2); requests per minute: 2 instead of 1');
  expect(lines.at(-2)).toStartWith('- Two-factor authentication was turned off');
  n.stop();
});

test('a key widened a little first, then a flood, then widened for real: the real widening is listed, not only the harmless one', async () => {
  const { mailer, sent } = fakeMailer();
  const n = new SecurityNotices(mailer, { enabled: true, windowMs: 1_000, publicUrl: 'https://gw' }, quiet);
  n.notify(user, { kind: 'relay_key_created', detail: '"junk" (id 2)', subject: 'relay key 2' });
  n.notify(user, { kind: 'relay_key_widened', detail: '"ci-deploy" (id 1); requests per minute: 61 instead of 60', subject: 'relay key 1' });
  for (let i = 0; i < 60; i++) n.notify(user, { kind: 'relay_key_widened', detail: `"junk" (id 2); requests per minute: ${i + 2} instead of ${i + 1}`, subject: 'relay key 2' });
  n.notify(user, { kind: 'relay_key_widened', detail: '"ci-deploy" (id 1); IP allow-list removed (any address)', subject: 'relay key 1' });
  // More flood after it cannot push it out again: the junk key has the most lines, so its own give way.
  for (let i = 0; i < 20; i++) n.notify(user, { kind: 'relay_key_widened', detail: `"junk" (id 2); tokens per minute: ${i + 2} instead of ${i + 1}`, subject: 'relay key 2' });
  await Bun.sleep(1_200);
  await n.idle();
  const lines = sent[1]!.text.split('\n').filter((l) => l.startsWith('- '));
  expect(lines).toHaveLength(51);
  expect(lines.filter((l) => l.includes('"ci-deploy" (id 1); requests per minute: 61'))).toHaveLength(1);
  expect(lines.filter((l) => l.includes('"ci-deploy" (id 1); IP allow-list removed'))).toHaveLength(1);
  expect(lines[50]).toBe('- and 32 more');
  n.stop();
});
