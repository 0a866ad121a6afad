/** `profile`: the caller's own account (`GET/PUT /api/user/self`). */
import type { Command } from 'commander';
import type { App } from '../core/context';
import { addFields, bodyFrom, requireSome, type Field } from '../core/fields';
import { apiParams } from '../core/params';
import { readSecret } from '../core/secrets';
import { userDetails } from './user';

const FIELDS: Field[] = [
  { name: 'username', kind: 'string', desc: 'username (root only: below root an admin sets it; needs your current password)' },
  { name: 'display_name', kind: 'string', desc: 'display name' },
  { name: 'email', kind: 'string', desc: 'e-mail address (receives password resets; needs your current password)' },
];

export function registerProfile(program: Command, app: App): void {
  const group = program.command('profile')
    .description('Your own account: show it, change your display name, e-mail or (root) username')
    .addHelpText('after', '\nExamples:\n  $ gw profile show\n  $ gw profile update --email alice@example.com     # prompts for your password');

  group.command('show')
    .description('Show your account')
    .addHelpText('after', '\nExample:\n  $ gw profile show --json')
    .action(app.action(async (ctx) => {
      const data = await ctx.client().call('GET', '/api/user/self');
      ctx.print(data, () => userDetails(data));
    }));

  apiParams(addFields(group.command('update').description('Change your display name, e-mail address or (root) username'), FIELDS)
    .option('--password-stdin', 'read your current password (needed for a new e-mail or username) from the first line of stdin')
    .addHelpText('after', `
Examples:
  $ gw profile update --display-name "Alice B."
  $ printf '%s\\n' "$PASSWORD" | gw profile update --email alice@example.com --password-stdin`),
  { current_password: { flag: 'your current password (--password-stdin, or the prompt on a terminal)' } })
    .action(app.action(async (ctx, _a, o) => {
      const body = await bodyFrom(ctx, o, FIELDS);
      requireSome(body, 'update');
      // Only asked for when the e-mail or username is being set; the server decides whether it actually changes.
      const pw = body.email === undefined && body.username === undefined ? undefined
        : await readSecret(ctx, { stdin: o.passwordStdin, jsonBodyFromStdin: o.jsonBody === '-', prompt: 'Current password: ' });
      if (pw !== undefined) body.current_password = pw;
      const data = await ctx.client().call('PUT', '/api/user/self', { body });
      ctx.print(data, () => `Updated your profile (${data.username}).\n`);
    }));
}
