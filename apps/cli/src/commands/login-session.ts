/**
 * `login-session`: the caller's login sessions (browser logins, `/api/user/session`), to spot one opened
 * by someone else and end it. The CLI itself uses an access token (`gw access-token`), not a session.
 */
import { InvalidArgumentError, type Command } from 'commander';
import type { App } from '../core/context';
import { col, table, time, type Column } from '../core/output';
import { apiParams } from '../core/params';
import { readCurrentPassword } from '../core/secrets';

const SESSION_ID = /^[0-9a-f]{16}$/;

function sessionId(value: string): string {
  if (!SESSION_ID.test(value)) throw new InvalidArgumentError('expected a session id: 16 lowercase hex characters (see `gw login-session list`).');
  return value;
}

/** Ending a session the CLI is not calling with needs the password (the CLI calls with an access token, so: always). */
const withPassword = (cmd: Command): Command => apiParams(
  cmd.option('--password-stdin', 'read your current password from the first line of stdin (prompted on a terminal otherwise)'),
  { current_password: { flag: 'your current password (--password-stdin, or the prompt on a terminal)' } },
);

export function registerLoginSession(program: Command, app: App): void {
  const group = program.command('login-session')
    .description('Your login sessions (browser logins): list them, end one, or end all but the current one')
    .addHelpText('after', '\nExamples:\n  $ gw login-session list\n  $ gw login-session end 3f9a0c1d2e4b5a6f\n  $ gw login-session end-others');

  group.command('list')
    .description('List your live login sessions, newest first (when and where each logged in)')
    .addHelpText('after', '\nExample:\n  $ gw login-session list --json')
    .action(app.action(async (ctx) => {
      const rows = await ctx.client().call<any[]>('GET', '/api/user/session');
      const columns: Column[] = [
        col('ID', 'id'), col('CREATED', 'created_at', { fmt: time }), col('EXPIRES', 'expires_at', { fmt: time }),
        col('IP', 'ip'), col('USER AGENT', 'user_agent'), { header: 'CURRENT', get: (r) => (r.current ? '*' : '') },
      ];
      ctx.print(rows, () => table(rows, columns));
    }));

  withPassword(group.command('end')
    .description('End one of your login sessions at once (needs your password)')
    .argument('<id>', 'session id (see `gw login-session list`)', sessionId)
    .addHelpText('after', '\nExamples:\n  $ gw login-session end 3f9a0c1d2e4b5a6f     # prompts for your password\n  $ printf \'%s\\n\' "$PASSWORD" | gw login-session end 3f9a0c1d2e4b5a6f --password-stdin'))
    .action(app.action(async (ctx, [id], opts) => {
      const body = { current_password: await readCurrentPassword(ctx, opts.passwordStdin) };
      const data = await ctx.client().call('DELETE', `/api/user/session/${id}`, { body });
      ctx.print(data, () => `Ended login session ${id}.\n`);
    }));

  withPassword(group.command('end-others')
    .description('End every login session but the one making the request (with an access token: every one; needs your password); access tokens stay')
    .addHelpText('after', '\nExample:\n  $ gw login-session end-others     # prompts for your password'))
    .action(app.action(async (ctx, _a, opts) => {
      const body = { current_password: await readCurrentPassword(ctx, opts.passwordStdin) };
      const data = await ctx.client().call<{ sessions_ended: number }>('POST', '/api/user/session/end_others', { body });
      ctx.print(data, () => `Ended ${data.sessions_ended} login session${data.sessions_ended === 1 ? '' : 's'}.\n`);
    }));
}
