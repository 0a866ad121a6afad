/**
 * `password reset-request` and `password reset`: the e-mailed password reset (public routes, no login).
 * Registered under the `password` command, which itself changes your own password.
 */
import { Option, type Command } from 'commander';
import type { App } from '../core/context';
import { UsageError } from '../core/errors';
import { apiParams } from '../core/params';
import { readSecret } from '../core/secrets';

export function registerReset(program: Command, app: App): void {
  const group = program.commands.find((c) => c.name() === 'password') ?? program.command('password');
  group.addHelpText('after', '\nForgotten password (no login needed):\n  $ gw password reset-request --email alice@example.com\n  $ gw password reset --email alice@example.com   # prompts for the e-mailed token');

  group.command('reset-request')
    .description('E-mail a single-use reset token to this address (the answer is the same whether or not it is registered)')
    .addOption(new Option('--email <address>', 'the account\'s e-mail address').makeOptionMandatory())
    .addHelpText('after', '\nExample:\n  $ gw password reset-request --url https://gw.example.com --email alice@example.com')
    .action(app.action(async (ctx, _a, o) => {
      const data = await ctx.anonClient().call('POST', '/api/user/reset/request', { body: { email: o.email } });
      ctx.print(data, () => `If ${o.email} belongs to an account, a reset token is on its way there.\n`);
    }));

  // `--reset-token`, not `--token`: that global flag is the management access token. The token also comes from
  // `--token-stdin` or a prompt, since a flag shows in ps and shell history (and stays valid if the command fails).
  apiParams(group.command('reset')
    .description('Set a new password with the e-mailed token; without a new password the gateway generates one (printed once). Ends all sessions')
    .addOption(new Option('--email <address>', 'the account\'s e-mail address').makeOptionMandatory())
    .option('--token-stdin', 'read the token, then the new password (an empty or missing line: generated), from the first two lines of stdin')
    .option('--reset-token <token>', 'the token from the e-mail (visible in ps and history: prefer --token-stdin or the prompt)')
    .option('--password-stdin', 'with --reset-token: read the new password from the first line of stdin')
    .addHelpText('after', `
Examples:
  $ gw password reset --email alice@example.com                                   # prompts for the token and the password
  $ printf '%s\\n%s\\n' "$TOKEN" "$NEW" | gw password reset --email alice@example.com --token-stdin`),
  { token: { flag: '--reset-token' }, password: { flag: 'the new password (--token-stdin, --password-stdin or the prompt)' } })
    .action(app.action(async (ctx, _a, o) => {
      let token: string | undefined = o.resetToken;
      let password: string | undefined;
      if (o.tokenStdin) {
        if (token !== undefined || o.passwordStdin) throw new UsageError('--token-stdin reads both the token and the password; use it without --reset-token and --password-stdin');
        const lines = (await ctx.io.readStdin()).split(/\r?\n/);
        token = lines[0];
        password = lines[1] || undefined;
        if (!token) throw new UsageError('--token-stdin: the first line (the reset token) is empty');
      } else {
        if (token === undefined) {
          if (!ctx.io.interactive) throw new UsageError('give the e-mailed token with --token-stdin (token, then the new password), at the prompt on a terminal, or with --reset-token');
          token = await ctx.io.prompt('Reset token from the e-mail: ', true);
          if (!token) throw new UsageError('empty reset token');
        }
        // Off a terminal and without --password-stdin, the gateway generates one.
        password = await readSecret(ctx, { stdin: o.passwordStdin, prompt: 'New password (empty: let the gateway generate one): ', confirm: true });
      }
      const client = ctx.anonClient();
      ctx.warnPlainHttp(client.url);
      const data = await client.call('POST', '/api/user/reset', { body: { email: o.email, token, password } });
      if (ctx.json) return ctx.print(data, () => '');
      if (data?.password) {
        ctx.io.err('Password reset. The generated password is shown only now:\n');
        ctx.secretLines([data.password]);
      } else ctx.io.out('Password reset; every session of the account has ended.\n');
    }));
}
