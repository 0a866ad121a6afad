import { expect, test } from 'bun:test';
import { join } from 'node:path';

// nodemailer and otplib cost every gateway process (each worker) about 7 MB resident together, for mail
// and 2FA that most processes never use: they load at their first use, not at start.
test('a gateway built as the server entry builds it (services and app, listening) has not loaded nodemailer or otplib without SMTP or 2FA use (and has loaded elysia: the check sees packages)', async () => {
  const proc = Bun.spawn([process.execPath, 'tests/helpers/loaded-packages.ts', 'nodemailer', 'otplib', 'elysia'], { cwd: join(import.meta.dir, '..', '..'), stdout: 'pipe', stderr: 'pipe' });
  const [out, err] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
  expect(await proc.exited).toBe(0);
  expect({ out: JSON.parse(out.trim().split('\n').at(-1)!), err }).toEqual({ out: { nodemailer: false, otplib: false, elysia: true }, err: '' });
}, 20_000);
