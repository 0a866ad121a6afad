/**
 * The owner of an account is e-mailed when something that outlives a login session changes on it: a new relay
 * key (which a stolen session can still create without the password), a relay key given more reach, a new access
 * token, 2FA on or off, a new password (also by a reset link), a new e-mail address (told to the old one). A burst becomes one immediate mail and one digest, never
 * silence. Over real HTTP against a real SMTP server, on either backend.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { generate } from 'otplib';
import { ON_PG, makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { startSmtp, type CapturedMail, type TestSmtp } from '../helpers/smtp';

let smtp: TestSmtp;
let gw: TestGateway;
beforeAll(async () => {
  smtp = await startSmtp();
  gw = await startGateway({ ...smtp.env, PUBLIC_URL: 'https://gw.example.com', SECURITY_NOTICE_WINDOW_SECONDS: '1', RESET_IP_PER_MINUTE: '1000' });
}, 30_000);
afterAll(async () => {
  await gw.stop();
  await smtp.stop();
});

const mailsTo = (to: string) => smtp.messages.filter((m) => m.to.includes(to));
const next = (to: string, after: number, timeoutMs = 5_000): Promise<CapturedMail> =>
  smtp.waitFor((m) => m.to.includes(to) && mailsTo(to).indexOf(m) >= after, timeoutMs);

/** The texts of the mails to `to` from index `after` on, once together they contain every one of `lines`. */
async function allOf(to: string, after: number, lines: string[], timeoutMs = 10_000): Promise<string> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const text = mailsTo(to).slice(after).map((m) => m.text).join('\n');
    if (lines.every((l) => text.includes(l))) return text;
    if (Date.now() > until) throw new Error(`mails to ${to} lack some of ${JSON.stringify(lines)}:\n${text}`);
    await Bun.sleep(20);
  }
}

async function userWithEmail(extra: Record<string, unknown> = {}) {
  const email = `${crypto.randomUUID().slice(0, 8)}@example.com`;
  return { ...(await makeUser(gw, 1, { email, ...extra })), email };
}

async function login(username: string, password: string): Promise<string> {
  const res = await fetch(`${gw.nodeUrl}/api/user/login`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'user-agent': 'stolen-browser/1.0' }, body: JSON.stringify({ username, password }),
  });
  expect(res.status).toBe(200);
  return res.headers.get('set-cookie')!.split(';')[0]!;
}

test('a relay key created with a session alone is reported to the owner with its name, id, address and User-Agent', async () => {
  const u = await userWithEmail();
  const cookie = await login(u.username, u.password);
  const res = await fetch(`${gw.nodeUrl}/api/token/`, {
    method: 'POST', headers: { cookie, 'content-type': 'application/json', 'user-agent': 'stolen-browser/1.0' }, body: JSON.stringify({ name: 'backdoor' }),
  });
  expect(res.status).toBe(200);
  const { id, key } = ((await res.json()) as any).data;
  const m = await next(u.email, 0);
  expect(m.subject).toBe('Security notice: A new relay API key was created');
  expect(m.text).toContain(`A new relay API key was created: "backdoor" (id ${id})`);
  expect(m.text).toContain('from 127.0.0.1');
  expect(m.text).toContain('User-Agent "stolen-browser/1.0"');
  expect(m.text).toContain('https://gw.example.com');
  expect(m.text).toContain(`"${u.username}"`);
  // The key itself is never mailed.
  expect(key).toStartWith('sk-');
  expect(m.raw).not.toContain(key);
  expect(m.raw).not.toContain(key.slice(3, 20));
});

test('notices after the first within the window are gathered into one digest, none lost; the next window starts fresh', async () => {
  const u = await userWithEmail();
  const keys: number[] = [];
  for (const name of ['mine', 'thief-1', 'thief-2']) {
    const r = await gw.nodeApi('POST', '/api/token/', { name }, u.token);
    expect(r.status).toBe(200);
    keys.push(r.body.data.id);
  }
  const first = await next(u.email, 0);
  expect(first.text).toContain(`"mine" (id ${keys[0]})`);
  expect(first.text).not.toContain('thief');
  const digest = await next(u.email, 1);
  expect(digest.subject).toBe('Security notice: 2 changes to your account');
  expect(digest.text).toContain(`"thief-1" (id ${keys[1]})`);
  expect(digest.text).toContain(`"thief-2" (id ${keys[2]})`);
  // An empty window closes without a mail; the next notice then goes out at once again.
  await Bun.sleep(2_300);
  expect(mailsTo(u.email).length).toBe(2);
  const t0 = Date.now();
  expect((await gw.nodeApi('POST', '/api/token/', { name: 'later' }, u.token)).status).toBe(200);
  const later = await next(u.email, 2);
  expect(later.text).toContain('"later"');
  expect(Date.now() - t0).toBeLessThan(900);
}, 20_000);

test('a key an admin creates for a user names the admin; hostile names stay one line of data', async () => {
  const u = await userWithEmail();
  const admin = await makeUser(gw, 10);
  const r = await gw.nodeApi('POST', '/api/token/', { name: 'x\r\nSubject: hi\u2028y\u202ez', user_id: u.id }, admin.token);
  expect(r.status).toBe(200);
  const m = await next(u.email, 0);
  expect(m.text).toContain(`by admin "${admin.username}" (user ${admin.id})`);
  expect(m.text).toContain('"x Subject: hi y z"');
  expect(m.subject).toBe('Security notice: A new relay API key was created');
  // A name cannot close its quotes and show a fake id before the real one.
  const forged = await gw.nodeApi('POST', '/api/token/', { name: 'ok" (id 1), at 2020-01-01Z, from 10.0.0.1 \\', user_id: u.id }, admin.token);
  expect(forged.status).toBe(200);
  const text = await allOf(u.email, 1, [`(id ${forged.body.data.id})`]);
  expect(text).toContain(`"ok\\" (id 1), at 2020-01-01Z, from 10.0.0.1 \\\\" (id ${forged.body.data.id})`);
});

test('look-alike key and model names: invisible characters show as spaces, non-ASCII is flagged, the id is always next to the name', async () => {
  const u = await userWithEmail();
  const own = await gw.nodeApi('POST', '/api/token/', { name: 'prod', models: ['claude-opus'] }, u.token);
  expect(own.status).toBe(200);
  await next(u.email, 0);
  await Bun.sleep(1_200); // past the window: one mail for the names below
  const names = [
    'pr\u200bod', // zero-width space inside
    '\u0440rod', // Cyrillic er
    'prod\u2060\u200d\ufeff', // invisible tail
    '\u200b\u2060', // nothing visible at all
    'ignore this e-mail\u00a0\u00a0it was you\u{e0041}',
  ];
  const ids: number[] = [];
  for (const name of names) {
    const r = await gw.nodeApi('POST', '/api/token/', { name }, u.token);
    expect(r.status).toBe(200);
    ids.push(r.body.data.id);
  }
  const widened = await gw.nodeApi('PUT', '/api/token/', { id: own.body.data.id, models: ['claude-opus', 'claude-\u200bopus'] }, u.token);
  expect(widened.status).toBe(200);
  const text = await allOf(u.email, 1, ids.map((id) => `id ${id}`).concat([`models: now also "claude- opus"`]));
  expect(text).toContain(`"pr od" (id ${ids[0]})`);
  expect(text).toContain(`"\u0440rod" (id ${ids[1]}, name not plain ASCII)`);
  expect(text).toContain(`"prod" (id ${ids[2]})`);
  expect(text).toContain(`"" (id ${ids[3]}, no visible name)`);
  expect(text).toContain(`"ignore this e-mail it was you" (id ${ids[4]})`);
  expect(text).toContain('may imitate');
  for (const hidden of ['\u200b', '\u2060', '\u200d', '\ufeff', '\u00a0', '\u{e0041}']) expect(text).not.toContain(hidden);
}, 30_000);

test('access tokens, 2FA on and off, a new password and a new e-mail address (told to the old one) are reported', async () => {
  const u = await userWithEmail();
  const tok = await gw.nodeApi('POST', '/api/user/access_token', { name: 'ci', current_password: u.password }, u.token);
  expect(tok.status).toBe(200);
  expect((await next(u.email, 0)).text).toContain(`A new management access token was created: "ci" (id ${tok.body.data.id})`);
  await Bun.sleep(1_200); // past the window: each of the following is checked on its own

  const setup = await gw.nodeApi('POST', '/api/user/2fa/setup', undefined, u.token);
  const on = await gw.nodeApi('POST', '/api/user/2fa/enable', { code: await generate({ secret: setup.body.data.secret }), current_password: u.password }, u.token);
  expect(on.status).toBe(200);
  const off = await gw.nodeApi('POST', '/api/user/2fa/disable', { code: on.body.data.backup_codes[0] }, u.token);
  expect(off.status).toBe(200);
  const pw = await gw.nodeApi('POST', '/api/user/password', { current_password: u.password, new_password: 'a-new-password-456' }, u.token);
  expect(pw.status).toBe(200);
  const newEmail = `${crypto.randomUUID().slice(0, 8)}@example.com`;
  const em = await gw.nodeApi('PUT', '/api/user/self', { email: newEmail, current_password: 'a-new-password-456' }, u.token);
  expect(em.status).toBe(200);

  // Hashing the new password can outlast the 1 s window, so the lines may come in one digest or two.
  const text = await allOf(u.email, 1, ['Two-factor authentication was turned on', 'Two-factor authentication was turned off',
    'The password was changed', `The e-mail address was changed: now ${newEmail}`]);
  expect(text.indexOf('turned on')).toBeLessThan(text.indexOf('turned off'));
  expect(mailsTo(newEmail)).toEqual([]);
}, 20_000);

test('an admin setting a password or resetting 2FA is reported as the admin; other profile edits are not reported', async () => {
  const u = await userWithEmail();
  const admin = await makeUser(gw, 10);
  const setup = await gw.nodeApi('POST', '/api/user/2fa/setup', undefined, u.token);
  const on = await gw.nodeApi('POST', '/api/user/2fa/enable', { code: await generate({ secret: setup.body.data.secret }), current_password: u.password }, u.token);
  expect(on.status).toBe(200);
  expect((await gw.nodeApi('PUT', '/api/user/', { id: u.id, password: 'set-by-admin-789' }, admin.token)).status).toBe(200);
  expect((await gw.nodeApi('PUT', '/api/user/', { id: u.id, display_name: 'renamed' }, admin.token)).status).toBe(200);
  expect((await gw.nodeApi('POST', `/api/user/${u.id}/2fa/reset`, undefined, admin.token)).status).toBe(200);
  const text = await allOf(u.email, 0, ['Two-factor authentication was turned on', 'The password was changed', 'Two-factor authentication was turned off']);
  const lines = text.split('\n').filter((l) => l.startsWith('- '));
  expect(lines).toHaveLength(3);
  expect(lines[0]).not.toContain('by admin');
  for (const l of lines.slice(1)) expect(l).toContain(`by admin "${admin.username}" (user ${admin.id})`);
  await Bun.sleep(1_500);
  expect(mailsTo(u.email).flatMap((m) => m.text.split('\n').filter((l) => l.startsWith('- ')))).toHaveLength(3);
}, 20_000);

test('nothing is sent for users without an address, or with SECURITY_NOTICES=false', async () => {
  const noMail = await makeUser(gw);
  const before = smtp.messages.length;
  expect((await gw.nodeApi('POST', '/api/token/', { name: 'k' }, noMail.token)).status).toBe(200);

  const off = await startGateway({ ...smtp.env, SECURITY_NOTICES: 'false' });
  try {
    const email = `${crypto.randomUUID().slice(0, 8)}@example.com`;
    const u = await makeUser(off, 1, { email });
    expect((await off.nodeApi('POST', '/api/token/', { name: 'k' }, u.token)).status).toBe(200);
    await Bun.sleep(500);
    expect(smtp.messages.length).toBe(before);
  } finally {
    await off.stop();
  }
}, 20_000);

test('after an e-mail change the new address gets one mail and a digest too, not one mail per notice', async () => {
  const u = await userWithEmail();
  const newEmail = `${crypto.randomUUID().slice(0, 8)}@example.com`;
  // The change is told to the old address, which opens that address's window.
  expect((await gw.nodeApi('PUT', '/api/user/self', { email: newEmail, current_password: u.password }, u.token)).status).toBe(200);
  for (const name of ['n-1', 'n-2', 'n-3']) expect((await gw.nodeApi('POST', '/api/token/', { name }, u.token)).status).toBe(200);
  await allOf(newEmail, 0, ['"n-1"', '"n-2"', '"n-3"']);
  const mails = mailsTo(newEmail);
  expect(mails).toHaveLength(2);
  expect(mails[1]!.subject).toBe('Security notice: 2 changes to your account');
  expect((await next(u.email, 0)).text).toContain(`The e-mail address was changed: now ${newEmail}`);
}, 20_000);

test('an admin moving a user to a new address (with a new password in the same request) is told to the old address', async () => {
  const u = await userWithEmail();
  const admin = await makeUser(gw, 10);
  const theirs = `${crypto.randomUUID().slice(0, 8)}@attacker.example`;
  const r = await gw.nodeApi('PUT', '/api/user/', { id: u.id, email: theirs, password: 'set-by-admin-789' }, admin.token);
  expect(r.status).toBe(200);
  expect(r.body.data.email).toBe(theirs);
  const text = await allOf(u.email, 0, [`The e-mail address was changed: now ${theirs}`, 'The password was changed']);
  for (const l of text.split('\n').filter((x) => x.startsWith('- '))) expect(l).toContain(`by admin "${admin.username}" (user ${admin.id})`);
  // Not to the new address alone, where the owner would never read it.
  expect(mailsTo(theirs)).toEqual([]);
}, 20_000);

test('a key its owner disabled, or that expired, made usable again with a session alone is reported like a new key', async () => {
  const u = await userWithEmail();
  const cookie = await login(u.username, u.password);
  const thief = (method: string, body: unknown) => fetch(`${gw.nodeUrl}/api/token/`, {
    method, headers: { cookie, 'content-type': 'application/json', 'user-agent': 'stolen-browser/1.0' }, body: JSON.stringify(body),
  });
  const leaked = (await gw.nodeApi('POST', '/api/token/', { name: 'leaked' }, u.token)).body.data;
  const expiring = (await gw.nodeApi('POST', '/api/token/', { name: 'expiring', expires_at: Math.floor(Date.now() / 1000) + 2 }, u.token)).body.data;
  expect((await gw.nodeApi('PUT', '/api/token/', { id: leaked.id, status: 2 }, u.token)).status).toBe(200);
  await allOf(u.email, 0, ['"leaked"', '"expiring"']);
  await Bun.sleep(3_000); // past the window, and past the second key's expiry
  const before = mailsTo(u.email).length;

  // Renaming a disabled key brings nothing back: not reported.
  expect((await thief('PUT', { id: leaked.id, name: 'leaked-2' })).status).toBe(200);
  expect((await thief('PUT', { id: leaked.id, status: 1 })).status).toBe(200);
  expect((await thief('PUT', { id: expiring.id, expires_at: null })).status).toBe(200);
  const text = await allOf(u.email, before, [
    `A disabled or expired relay API key was made usable again: "leaked-2" (id ${leaked.id})`,
    `A disabled or expired relay API key was made usable again: "expiring" (id ${expiring.id})`,
  ]);
  expect(text).toContain('User-Agent "stolen-browser/1.0"');
  await Bun.sleep(1_500);
  expect(mailsTo(u.email).slice(before).flatMap((m) => m.text.split('\n').filter((l) => l.startsWith('- ')))).toHaveLength(2);
}, 25_000);

/** The notice lines ("- …") of the security notices to `to` from index `after` on. */
const noticeLines = (to: string, after = 0) =>
  mailsTo(to).slice(after).filter((m) => m.subject.startsWith('Security notice')).flatMap((m) => m.text.split('\n').filter((l) => l.startsWith('- ')));

/** A key with every reach restricted, made by its owner; returns once its creation notice is out and the window over. */
async function restrictedKey(u: { token: string; email: string }, extra: Record<string, unknown> = {}) {
  const r = await gw.nodeApi('POST', '/api/token/', {
    name: 'ci-deploy', allow_ips: ['10.1.0.0/16'], models: ['gpt-4o'], unlimited_quota: false, remain_quota: 1000,
    expires_at: Math.floor(Date.now() / 1000) + 86_400, rate_limit_rpm: 60, model_limits: { 'gpt-*': { rate_limit_rpm: 10 } }, ...extra,
  }, u.token);
  expect(r.status).toBe(200);
  await allOf(u.email, 0, ['"ci-deploy"']);
  await Bun.sleep(1_200);
  return r.body.data as { id: number; expires_at: number };
}

test('each way a live key is given more reach is reported, naming the key and what widened, from where', async () => {
  const u = await userWithEmail();
  const key = await restrictedKey(u);
  const before = mailsTo(u.email).length;
  const later = key.expires_at + 86_400;
  const steps: Array<[Record<string, unknown>, string]> = [
    [{ allow_ips: ['10.1.0.0/16', '10.0.0.0/8'] }, 'IP allow-list: now also 10.0.0.0/8'],
    [{ allow_ips: null }, 'IP allow-list removed (any address)'],
    [{ models: ['gpt-4o', 'o3'] }, 'models: now also "o3"'],
    [{ models: [] }, 'models: now any'],
    [{ remain_quota: 5000 }, 'quota: raised from 1000 to 5000'],
    [{ unlimited_quota: true }, 'quota: unlimited'],
    [{ expires_at: later }, `expiry extended to ${new Date(later * 1000).toISOString().replace('.000Z', 'Z')}`],
    [{ expires_at: null }, 'expiry removed (never expires)'],
    [{ rate_limit_rpm: 0 }, 'requests per minute: unlimited instead of 60'],
    [{ model_limits: null }, 'per-model limits loosened for "gpt-*"'],
  ];
  for (const [body, _] of steps) {
    expect((await gw.nodeApi('PUT', '/api/token/', { id: key.id, ...body }, u.token, { 'user-agent': 'stolen-browser/1.0' })).status).toBe(200);
  }
  await allOf(u.email, before, steps.map(([, phrase]) => phrase));
  await Bun.sleep(1_500);
  const lines = noticeLines(u.email, before);
  expect(lines).toHaveLength(steps.length);
  for (const [i, [, phrase]] of steps.entries()) {
    expect(lines[i]).toStartWith(`- A relay API key was given more reach: "ci-deploy" (id ${key.id}); ${phrase}, at `);
    expect(lines[i]).toContain('from 127.0.0.1, User-Agent "stolen-browser/1.0"');
    expect(lines[i]).not.toContain('by admin');
  }
}, 25_000);

// SQLite has one connection per process, whose write cannot be held open from here without stopping the gateway too;
// the same interleaving is forced there through the key store (tests/attack/key-widening-lost-update.test.ts).
test.skipIf(!ON_PG)('a thief writing back the wide allow-list while the owner narrows it is reported (the write\'s own comparison, row locked)', async () => {
  const u = await userWithEmail();
  const key = await restrictedKey(u, { allow_ips: ['10.0.0.0/8'] });
  const before = mailsTo(u.email).length;
  const sql = gw.services.backend.pg!.sql;
  let put!: ReturnType<TestGateway['api']>;
  await sql.begin(async (tx: any) => {
    const [{ pid }] = await tx`select pg_backend_pid() as pid`;
    await tx`select id from api_keys where id = ${key.id} for update`;
    // The thief's update starts while the key is locked: it has read, or waits to read, the /8.
    put = gw.api('PUT', '/api/token/', { id: key.id, allow_ips: ['10.0.0.0/8'] }, u.token, { 'user-agent': 'stolen-browser/1.0' });
    for (let i = 0; ; i++) {
      const [w] = await sql`select count(*)::int as n from pg_stat_activity where ${pid}::int = any(pg_blocking_pids(pid))`;
      if (w.n > 0) break;
      if (i > 500) throw new Error('the PUT never waited on the row');
      await Bun.sleep(10);
    }
    // The owner's narrowing lands first (written as their PUT would, in the transaction holding the row).
    await tx`update api_keys set allow_ips = ${JSON.stringify(['10.1.0.0/16'])}::jsonb where id = ${key.id}`;
  });
  const r = await put;
  expect(r.status).toBe(200);
  expect(r.body.data.allow_ips).toEqual(['10.0.0.0/8']);
  await allOf(u.email, before, [`"ci-deploy" (id ${key.id}); IP allow-list: now also 10.0.0.0/8`]);
}, 20_000);

test('narrowing a key, renaming or disabling it sends nothing', async () => {
  const u = await userWithEmail();
  const key = await restrictedKey(u, { allow_ips: null, models: null, expires_at: null, unlimited_quota: true, rate_limit_rpm: 0, model_limits: null });
  const before = mailsTo(u.email).length;
  for (const body of [
    { allow_ips: ['10.0.0.0/8'] }, { allow_ips: ['10.1.0.0/16'] }, { allow_ips: ['10.1.0.0/17', '10.1.128.0/17'] },
    { models: ['gpt-4o', 'o3'] }, { models: ['gpt-4o'] },
    { unlimited_quota: false, remain_quota: 1000 }, { remain_quota: 10 }, { remain_quota: 10 },
    { expires_at: Math.floor(Date.now() / 1000) + 86_400 }, { expires_at: Math.floor(Date.now() / 1000) + 3_600 },
    { rate_limit_rpm: 60, max_concurrency: 2 }, { rate_limit_rpm: 30 }, { model_limits: { 'gpt-*': { rate_limit_rpm: 10 } } },
    { model_limits: { 'gpt-*': { rate_limit_rpm: 10 }, 'gpt-4o': { rate_limit_rpm: 5 } } },
    { group: 'default' }, { name: 'renamed' }, { status: 2 },
  ]) expect((await gw.nodeApi('PUT', '/api/token/', { id: key.id, ...body }, u.token)).status).toBe(200);
  // A widening after them all: the first notice since, so nothing the narrowing sent can hide in a later digest.
  expect((await gw.nodeApi('PUT', '/api/token/', { id: key.id, remain_quota: 20 }, u.token)).status).toBe(200);
  await allOf(u.email, before, ['quota: raised from 10 to 20']);
  await Bun.sleep(1_500);
  expect(noticeLines(u.email, before)).toHaveLength(1);
}, 25_000);

test('an admin widening a user\'s key, or moving it to another group, is reported as that admin', async () => {
  const u = await userWithEmail();
  const admin = await makeUser(gw, 10);
  const key = await restrictedKey(u);
  const before = mailsTo(u.email).length;
  expect((await gw.nodeApi('PUT', '/api/token/', { id: key.id, allow_ips: null, group: 'vip' }, admin.token)).status).toBe(200);
  const text = await allOf(u.email, before, ['IP allow-list removed']);
  expect(text).toContain(`A relay API key was given more reach: "ci-deploy" (id ${key.id}); IP allow-list removed (any address); group: now "vip" instead of "default", at `);
  expect(text).toContain(`by admin "${admin.username}" (user ${admin.id})`);
}, 20_000);

test('a retired key brought back wider says so in its one line', async () => {
  const u = await userWithEmail();
  const key = await restrictedKey(u);
  expect((await gw.nodeApi('PUT', '/api/token/', { id: key.id, status: 2 }, u.token)).status).toBe(200);
  await Bun.sleep(1_200);
  const before = mailsTo(u.email).length;
  expect((await gw.nodeApi('PUT', '/api/token/', { id: key.id, status: 1, allow_ips: null }, u.token)).status).toBe(200);
  await allOf(u.email, before, [`made usable again: "ci-deploy" (id ${key.id}); IP allow-list removed (any address)`]);
  await Bun.sleep(1_500);
  expect(noticeLines(u.email, before)).toHaveLength(1);
}, 20_000);

test('a completed password reset is reported to the address, from where; failed ones are not, and the new password never is', async () => {
  const u = await userWithEmail();
  const reset = (body: Record<string, unknown>) => gw.nodeApi('POST', '/api/user/reset', { email: u.email, ...body }, null, { 'user-agent': 'reset-browser/2.0' });
  const requested = mailsTo(u.email).length;
  expect((await gw.nodeApi('POST', '/api/user/reset/request', { email: u.email }, null)).status).toBe(200);
  const token = /[?&]token=([A-Za-z0-9]+)/.exec((await next(u.email, requested)).text)![1]!;

  expect((await reset({ token: 'not-the-token', password: 'chosen-by-thief-1' })).status).toBe(400);
  expect((await reset({ token, password: 'short' })).status).toBe(400);
  await Bun.sleep(800);
  expect(noticeLines(u.email)).toEqual([]);

  const done = await reset({ token });
  expect(done.status).toBe(200);
  const generated: string = done.body.data.password;
  const m = await smtp.waitFor((x) => x.to.includes(u.email) && x.subject.startsWith('Security notice'), 5_000);
  expect(m.subject).toBe('Security notice: The password was reset with a link e-mailed to this address');
  expect(m.text).toContain('from 127.0.0.1, User-Agent "reset-browser/2.0"');
  expect(m.raw).not.toContain(generated);
  expect(m.raw).not.toContain(token);

  // The used token fails again, and says nothing.
  expect((await reset({ token, password: 'chosen-by-thief-2' })).status).toBe(400);
  await Bun.sleep(1_500);
  expect(noticeLines(u.email)).toHaveLength(1);
}, 20_000);

test('a reset link mailed to an address the account has left no longer resets it (else its notice would name the wrong address)', async () => {
  // The owner moves away from a mailbox someone else reads; that reader asked for a reset link just before, and
  // learns the new address from the change notice mailed to the old one.
  const u = await userWithEmail();
  const requested = mailsTo(u.email).length;
  expect((await gw.nodeApi('POST', '/api/user/reset/request', { email: u.email }, null)).status).toBe(200);
  const token = /[?&]token=([A-Za-z0-9]+)/.exec((await next(u.email, requested)).text)![1]!;
  const moved = `${crypto.randomUUID().slice(0, 8)}@example.org`;
  expect((await gw.nodeApi('PUT', '/api/user/self', { email: moved, current_password: u.password }, u.token)).status).toBe(200);
  expect(await allOf(u.email, requested, [`The e-mail address was changed: now ${moved}`])).toBeTruthy();

  for (const email of [moved, u.email]) {
    const r = await gw.nodeApi('POST', '/api/user/reset', { email, token, password: 'chosen-by-thief-1' }, null);
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('invalid_reset_token');
  }
  expect((await gw.nodeApi('POST', '/api/user/login', { username: u.username, password: u.password }, null)).status).toBe(200);
  await Bun.sleep(1_500);
  expect(noticeLines(moved)).toEqual([]);

  // A link mailed to the new address works, and its notice goes there.
  const again = mailsTo(moved).length;
  expect((await gw.nodeApi('POST', '/api/user/reset/request', { email: moved }, null)).status).toBe(200);
  const fresh = /[?&]token=([A-Za-z0-9]+)/.exec((await next(moved, again)).text)![1]!;
  expect((await gw.nodeApi('POST', '/api/user/reset', { email: moved, token: fresh, password: 'a-new-password-1' }, null)).status).toBe(200);
  await allOf(moved, again, ['The password was reset with a link e-mailed to this address']);
}, 25_000);

test('a key\'s budget raised or cleared (PUT, DELETE /api/budget/) is reported as more reach; set, lowered or another period\'s is not', async () => {
  const u = await userWithEmail();
  const key = await restrictedKey(u, { unlimited_quota: true });
  const budget = (limit: number, period = 'daily') => gw.nodeApi('PUT', '/api/budget/', { scope: 'key', subject_id: key.id, period, limit }, u.token, { 'user-agent': 'stolen-browser/1.0' });
  const before = mailsTo(u.email).length;
  const set = await budget(100);
  expect(set.status).toBe(200);
  expect((await budget(50)).status).toBe(200);
  expect((await budget(500, 'monthly')).status).toBe(200);
  expect((await budget(1_000_000_000)).status).toBe(200);
  expect((await gw.nodeApi('DELETE', `/api/budget/${set.body.data.id}`, undefined, u.token, { 'user-agent': 'stolen-browser/1.0' })).status).toBe(200);
  const prefix = `- A relay API key was given more reach: "ci-deploy" (id ${key.id}); `;
  await allOf(u.email, before, ['daily budget: raised from 50 to 1000000000', 'daily budget removed']);
  await Bun.sleep(1_500);
  const lines = noticeLines(u.email, before);
  expect(lines).toHaveLength(2);
  expect(lines[0]).toStartWith(`${prefix}daily budget: raised from 50 to 1000000000, at `);
  expect(lines[1]).toStartWith(`${prefix}daily budget removed (no daily limit), at `);
  for (const l of lines) expect(l).toContain('User-Agent "stolen-browser/1.0"');
}, 25_000);

test('an expiry moved past what a date can show (expires_at 9e12) is still reported, and the answer is not a 500 after the write', async () => {
  const u = await userWithEmail();
  const key = await restrictedKey(u);
  const before = mailsTo(u.email).length;
  const r = await gw.nodeApi('PUT', '/api/token/', { id: key.id, expires_at: 9_000_000_000_000 }, u.token);
  expect(r.status).toBe(200);
  expect(r.body.data.expires_at).toBe(9_000_000_000_000);
  await allOf(u.email, before, [`"ci-deploy" (id ${key.id}); expiry extended to unix time 9000000000000`]);
}, 20_000);
