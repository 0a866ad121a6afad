/**
 * `password reset-request` and `password reset`: the e-mailed password reset (public routes, no login).
 * Registered under the `password` command, which itself changes your own password.
 */
import { Option, type Command } from 'commander';
import type { App } from '../core/context';
import { apiParams } from '../core/params';
import { readSecret } from '../core/secrets';

export function registerReset(program: Command, app: App): void {
  const group = program.commands.find((c) => c.name() === 'password') ?? program.command('password');
  group.addHelpText('after', '\nForgotten password (no login needed):\n  $ gw password reset-request --email alice@example.com\n  $ gw password reset --email alice@example.com --reset-token <token from the e-mail>');

  group.command('reset-request')
    .description('E-mail a single-use reset token to this address (the answer is the same whether or not it is registered)')
    .addOption(new Option('--email <address>', 'the account\'s e-mail address').makeOptionMandatory())
    .addHelpText('after', '\nExample:\n  $ gw password reset-request --url https://gw.example.com --email alice@example.com')
    .action(app.action(async (ctx, _a, o) => {
      const data = await ctx.anonClient().call('POST', '/api/user/reset/request', { body: { email: o.email } });
      ctx.print(data, () => `If ${o.email} belongs to an account, a reset token is on its way there.\n`);
    }));

  // `--reset-token`, not `--token`: that global flag is the management access token.
  apiParams(group.command('reset')
    .description('Set a new password with the e-mailed token; without a new password the gateway generates one (printed once). Ends all sessions')
    .addOption(new Option('--email <address>', 'the account\'s e-mail address').makeOptionMandatory())
    .addOption(new Option('--reset-token <token>', 'the token from the e-mail').makeOptionMandatory())
    .option('--password-stdin', 'read the new password from the first line of stdin')
    .addHelpText('after', `
Examples:
  $ gw password reset --email alice@example.com --reset-token "$TOKEN"            # prompts, or generates one
  $ printf '%s\\n' "$NEW" | gw password reset --email alice@example.com --reset-token "$TOKEN" --password-stdin`),
  { token: { flag: '--reset-token' }, password: { flag: 'the new password (--password-stdin or the prompt)' } })
    .action(app.action(async (ctx, _a, o) => {
      // Off a terminal and without --password-stdin, the gateway generates one.
      const password = await readSecret(ctx, { stdin: o.passwordStdin, prompt: 'New password (empty: let the gateway generate one): ', confirm: true });
      const data = await ctx.anonClient().call('POST', '/api/user/reset', { body: { email: o.email, token: o.resetToken, password } });
      if (ctx.json) return ctx.print(data, () => '');
      if (data?.password) {
        ctx.io.err('Password reset. The generated password is shown only now:\n');
        ctx.io.out(`${data.password}\n`);
      } else ctx.io.out('Password reset; every session of the account has ended.\n');
    }));
}
