/** `password`: change your own password (`POST /api/user/password`). */
import type { Command } from 'commander';
import type { App } from '../core/context';
import { UsageError } from '../core/errors';

export function registerPassword(program: Command, app: App): void {
  program.command('password')
    .description('Change your own password (prompted on a terminal); every other session and access token of yours ends')
    .option('--stdin', 'read the current password and the new one from the first two lines of stdin')
    .addHelpText('after', `
Examples:
  $ gw password
  $ printf '%s\\n%s\\n' "$OLD" "$NEW" | gw password --stdin`)
    .action(app.action(async (ctx, _a, o) => {
      const client = ctx.client();
      let current: string;
      let next: string;
      if (o.stdin) {
        const lines = (await ctx.io.readStdin()).split(/\r?\n/);
        current = lines[0] ?? '';
        next = lines[1] ?? '';
      } else if (ctx.io.interactive) {
        current = await ctx.io.prompt('Current password: ', true);
        next = await ctx.io.prompt('New password: ', true);
        if (next !== await ctx.io.prompt('Repeat new password: ', true)) throw new UsageError('the new passwords do not match');
      } else {
        throw new UsageError('stdin is not a terminal; use --stdin (current password, then the new one, one per line)');
      }
      if (!current || !next) throw new UsageError('both the current and the new password are needed');
      const data = await client.call('POST', '/api/user/password', { body: { current_password: current, new_password: next } });
      // The server reports what it ended; this CLI's own token is the one credential kept.
      ctx.print(data, () => `Password changed. Ended ${data.sessions_ended} login session(s) and revoked ${data.tokens_revoked} other access token(s); the token this CLI uses stays valid.\n`);
    }));
}
