/** `2fa`: the caller's own two-factor authentication (`/api/user/2fa/*`). Admins reset others' with `gw user reset-2fa`. */
import type { Command } from 'commander';
import { renderUnicodeCompact } from 'uqr';
import type { App, Ctx } from '../core/context';
import { UsageError } from '../core/errors';
import { details } from '../core/output';
import { apiParams } from '../core/params';
import { readCurrentPassword } from '../core/secrets';

/** The commands that confirm with a code differ only in route, wording and what they print. */
const CODE_COMMANDS = [
  {
    name: 'enable', path: 'enable', accepts: 'a current code from the authenticator app', password: true,
    desc: 'Turn 2FA on by confirming `gw 2fa setup` with your password and a current code; prints 10 single-use backup codes once and ends your other login sessions',
  },
  {
    name: 'disable', path: 'disable', accepts: 'a current authenticator code or an unused backup code', password: false,
    desc: 'Turn 2FA off (needs a current code or a backup code)',
  },
  {
    name: 'backup-codes', path: 'backup_codes', accepts: 'a current code from the authenticator app', password: true,
    desc: 'Replace your backup codes with your password and a current code (the old ones stop working); prints the new ones once and ends your other login sessions',
  },
] as const;

export function registerTwoFactor(program: Command, app: App): void {
  const group = program.command('2fa')
    .description('Your own two-factor authentication (TOTP authenticator app and backup codes)')
    .addHelpText('after', '\nExamples:\n  $ gw 2fa setup            # scan the QR code\n  $ gw 2fa enable --code 123456    # prompts for your password\n  $ gw 2fa status');

  group.command('status')
    .description('Whether 2FA is on, and how many backup codes are left')
    .addHelpText('after', '\nExample:\n  $ gw 2fa status --json')
    .action(app.action(async (ctx) => {
      const data = await ctx.client().call('GET', '/api/user/2fa/status');
      ctx.print(data, () => details([['2fa', data.enabled ? 'on' : 'off'], ['backup codes left', data.backup_codes_remaining]]));
    }));

  group.command('setup')
    .description('Start setup: prints a new secret as an otpauth URI and a QR code to scan; not active until `gw 2fa enable`')
    .addHelpText('after', '\nExample:\n  $ gw 2fa setup && gw 2fa enable')
    .action(app.action(async (ctx) => {
      const data = await ctx.client().call('POST', '/api/user/2fa/setup');
      if (ctx.json) return ctx.print(data, () => '');
      ctx.io.out(`${renderUnicodeCompact(data.otpauth_uri, { border: 2 })}\n`);
      ctx.secretLines([data.otpauth_uri]);
      ctx.note(`Scan the QR code (or enter the secret ${data.secret}) in your authenticator app, then confirm with: gw 2fa enable --code <code>\n`);
    }));

  for (const c of CODE_COMMANDS) {
    // The server's `code` field maps to --code through the option's name (see core/params).
    const cmd = group.command(c.name)
      .description(c.desc)
      .option('--code <code>', `${c.accepts} (prompted on a terminal when omitted)`);
    // Turning 2FA on and new backup codes hand out login secrets: the server wants the password too, so a
    // stolen session or token cannot do either. The 2fa group has no options of its own to capture this one.
    if (c.password) {
      apiParams(cmd.option('--password-stdin', 'read your current password from the first line of stdin (prompted on a terminal otherwise)'),
        { current_password: { flag: 'your current password (--password-stdin, or the prompt on a terminal)' } });
    }
    cmd.addHelpText('after', c.password
      ? `\nExamples:\n  $ gw 2fa ${c.name} --code 123456            # prompts for your password\n  $ printf '%s\\n' "$PASSWORD" | gw 2fa ${c.name} --code 123456 --password-stdin`
      : `\nExample:\n  $ gw 2fa ${c.name} --code 123456`)
      .action(app.action(async (ctx, _a, o) => {
        const code = await codeFrom(ctx, o.code, c.accepts);
        const body: Record<string, string> = { code };
        if (c.password) {
          body.current_password = await readCurrentPassword(ctx, o.passwordStdin);
        }
        const data = await ctx.client().call('POST', `/api/user/2fa/${c.path}`, { body });
        if (ctx.json) return ctx.print(data, () => '');
        if (data?.backup_codes) {
          ctx.note(`${c.name === 'enable' ? 'Two-factor authentication is on. ' : ''}Ended ${data.sessions_ended ?? 0} other login session(s). Backup codes, each usable once, shown only now:`);
          ctx.secretLines(data.backup_codes);
        } else ctx.io.out('Two-factor authentication is off.\n');
      }));
  }
}

async function codeFrom(ctx: Ctx, given: string | undefined, accepts: string): Promise<string> {
  if (given) return given.trim();
  if (!ctx.io.interactive) throw new UsageError(`missing --code (${accepts})`);
  const code = (await ctx.io.prompt('Code: ')).trim();
  if (!code) throw new UsageError('no code given');
  return code;
}
