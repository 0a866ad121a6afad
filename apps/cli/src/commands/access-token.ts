/**
 * `access-token`: the caller's management access tokens (`gwm_…`, `/api/user/access_token`), for scripts
 * and this CLI. Not to be confused with relay API keys (`sk-…`, `gw key`). `token` is a hidden,
 * deprecated alias kept for old scripts: the same commands, plus a notice on stderr.
 */
import { Option, type Command } from 'commander';
import type { App } from '../core/context';
import { parseId } from '../core/fields';
import { col, table, time, type Column } from '../core/output';
import { apiParams } from '../core/params';
import { readCurrentPassword } from '../core/secrets';

export function registerAccessToken(program: Command, app: App): void {
  build(program.command('access-token'), app, 'access-token');
  const old = program.command('token', { hidden: true });
  old.hook('preAction', () => app.io.err('notice: `gw token` is deprecated; use `gw access-token` (relay API keys are `gw key`)\n'));
  build(old, app, 'token');
}

function build(group: Command, app: App, name: string): void {
  group
    .description('Management access tokens (gwm_…) of the current user: Bearer tokens for scripts and this CLI; relay keys are `gw key`')
    .addHelpText('after', `\nExamples:\n  $ gw ${name} list\n  $ gw ${name} create --name ci --expires-in-days 90\n  $ gw ${name} revoke 7`);

  group.command('list')
    .description('List your access tokens (secrets are never shown; only their prefix)')
    .addHelpText('after', `\nExample:\n  $ gw ${name} list --json`)
    .action(app.action(async (ctx) => {
      const client = ctx.client();
      const current = ctx.credentials().token ?? '';
      const rows = await client.call<any[]>('GET', '/api/user/access_token');
      const columns: Column[] = [
        col('ID', 'id', { right: true }), col('NAME', 'name'), col('PREFIX', 'prefix'),
        col('CREATED', 'created_at', { fmt: time }), col('EXPIRES', 'expires_at', { fmt: time }),
        col('LAST USED', 'last_used_at', { fmt: time }), col('REVOKED', 'revoked'),
        { header: 'CURRENT', get: (r) => (current.startsWith(r.prefix) ? '*' : '') },
      ];
      ctx.print(rows, () => table(rows, columns));
    }));

  apiParams(group.command('create')
    .description('Create an access token (needs your password); it is printed once on stdout (notes go to stderr)')
    .option('--name <name>', 'a label for the token')
    .addOption(new Option('--expires-in-days <n>', 'lifetime in days (default: no expiry)').argParser(parseId))
    .option('--password-stdin', 'read your current password from the first line of stdin (prompted on a terminal otherwise)')
    .addHelpText('after', `\nExamples:\n  $ gw ${name} create --name ci --expires-in-days 30     # prompts for your password\n  $ export GATEWAY_TOKEN=$(printf '%s\\n' "$PASSWORD" | gw ${name} create --name ci --password-stdin)`),
  { current_password: { flag: 'your current password (--password-stdin, or the prompt on a terminal)' } })
    .action(app.action(async (ctx, _a, opts) => {
      const body: Record<string, unknown> = { name: opts.name ?? '' };
      if (opts.expiresInDays) body.expires_in_days = opts.expiresInDays;
      body.current_password = await readCurrentPassword(ctx, opts.passwordStdin);
      const t = await ctx.client().call('POST', '/api/user/access_token', { body });
      if (ctx.json) ctx.print(t, () => '');
      else {
        ctx.note(`Created access token ${t.id}${t.name ? ` (${t.name})` : ''}. It is shown only now; store it safely:\n`);
        ctx.secretLines([t.token]);
      }
    }));

  apiParams(group.command('revoke')
    .alias('delete')
    .description('Revoke one of your access tokens (needs your password: a stolen token alone must not break your scripts)')
    .argument('<id>', `token id (see \`gw ${name} list\`)`, parseId)
    .option('--password-stdin', 'read your current password from the first line of stdin (prompted on a terminal otherwise)')
    .addHelpText('after', `\nExamples:\n  $ gw ${name} revoke 7     # prompts for your password\n  $ printf '%s\\n' "$PASSWORD" | gw ${name} revoke 7 --password-stdin`),
  { current_password: { flag: 'your current password (--password-stdin, or the prompt on a terminal)' } })
    .action(app.action(async (ctx, [id], opts) => {
      const body = { current_password: await readCurrentPassword(ctx, opts.passwordStdin) };
      const data = await ctx.client().call('DELETE', `/api/user/access_token/${id}`, { body });
      ctx.print(data, () => `Revoked access token ${id}.\n`);
    }));
}
