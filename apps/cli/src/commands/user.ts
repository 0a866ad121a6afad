/** `user`: user administration (`/api/user/`, admin). */
import { Option, type Command } from 'commander';
import type { App, Ctx } from '../core/context';
import { readSecret } from '../core/secrets';
import { addFields, addPaging, bodyFrom, pagingQuery, parseId, requireFields, requireSome, type Field } from '../core/fields';
import { col, details, pageText, roleName, statusName, time } from '../core/output';
import { LIMIT_FIELDS, limitRows } from './limit-fields';

const FIELDS: Field[] = [
  { name: 'username', kind: 'string', desc: 'login name' },
  { name: 'display_name', kind: 'string', desc: 'display name' },
  { name: 'email', kind: 'string', desc: 'e-mail address (for password resets)' },
  { name: 'role', kind: 'int', desc: '1 user, 10 admin, 100 root' },
  { name: 'group', kind: 'string', desc: 'pricing/routing group' },
  ...LIMIT_FIELDS,
];
const CREATE_FIELDS: Field[] = [...FIELDS, { name: 'quota', kind: 'int', desc: 'initial balance in quota units (later changes: gw ledger adjust)' }];
const UPDATE_FIELDS: Field[] = [...FIELDS, { name: 'status', kind: 'int', desc: '1 enabled, 2 disabled' }];

const COLUMNS = [
  col('ID', 'id', { right: true }), col('USERNAME', 'username'), col('NAME', 'display_name'), col('ROLE', 'role', { fmt: roleName }),
  col('STATUS', 'status', { fmt: statusName }), col('GROUP', 'group'), col('QUOTA', 'quota', { right: true }),
  col('USED', 'used_quota', { right: true }), col('REQUESTS', 'request_count', { right: true }), col('2FA', 'totp_enabled'),
  col('CREATED', 'created_at', { fmt: time }),
];

/** Human rendering of a user; also used by `whoami`-like outputs. */
export const userDetails = (u: any) => details([
  ['id', u.id], ['username', u.username], ['display name', u.display_name], ['email', u.email], ['role', roleName(u.role)],
  ['status', statusName(u.status)], ['group', u.group], ['quota', u.quota], ['used quota', u.used_quota],
  ['requests', u.request_count], ...limitRows(u), ['2fa', u.totp_enabled], ['created', time(u.created_at)], ['updated', time(u.updated_at)],
]);

/** A new user's password is prompted for (twice) on a terminal; an update only changes it when given. */
const password = (ctx: Ctx, o: Record<string, any>, prompt: boolean) => readSecret(ctx, {
  stdin: o.passwordStdin, jsonBodyFromStdin: o.jsonBody === '-', value: o.password, prompt: prompt ? 'New password: ' : undefined, confirm: true,
});

const passwordOptions = (cmd: Command) => cmd
  .option('--password-stdin', 'read the password from the first line of stdin')
  .option('--password <password>', 'password on the command line (last resort: visible in ps and history)');

export function registerUser(program: Command, app: App): void {
  const group = program.command('user')
    .description('Users (admin)')
    .addHelpText('after', '\nExamples:\n  $ gw user list --keyword alice\n  $ gw user disable 12');

  addPaging(group.command('list')
    .description('List users')
    .option('--keyword <text>', 'match in username, display name or e-mail')
    .addOption(new Option('--role <n>', '1 user, 10 admin, 100 root').argParser(parseId))
    .addOption(new Option('--status <n>', '1 enabled, 2 disabled').argParser(parseId))
    .option('--group <group>', 'only this group'))
    .addHelpText('after', '\nExample:\n  $ gw user list --role 10 --json | jq -r \'.items[].username\'')
    .action(app.action(async (ctx, _a, o) => {
      const data = await ctx.client().call('GET', '/api/user/', {
        query: { ...pagingQuery(o), keyword: o.keyword, role: o.role, status: o.status, group: o.group },
      });
      ctx.print(data, () => pageText(data, COLUMNS));
    }));

  group.command('get')
    .description('Show one user')
    .argument('<id>', 'user id', parseId)
    .addHelpText('after', '\nExample:\n  $ gw user get 12')
    .action(app.action(async (ctx, [id]) => {
      const data = await ctx.client().call('GET', `/api/user/${id}`);
      ctx.print(data, () => userDetails(data));
    }));

  passwordOptions(addFields(group.command('create').description('Create a user (password prompted on a terminal)'), CREATE_FIELDS))
    .addHelpText('after', '\nExamples:\n  $ gw user create --username alice --display-name "Alice" --group vip\n  $ pwgen 24 1 | gw user create --username bot --password-stdin --quota 500000')
    .action(app.action(async (ctx, _a, o) => {
      const body = await bodyFrom(ctx, o, CREATE_FIELDS);
      const pw = await password(ctx, o, body.password === undefined);
      if (pw !== undefined) body.password = pw;
      requireFields(body, ['username', 'password']);
      const data = await ctx.client().call('POST', '/api/user/', { body });
      ctx.print(data, () => `Created user ${data.id} (${data.username}).\n`);
    }));

  passwordOptions(addFields(group.command('update').description('Change some fields of a user (balance: gw ledger adjust)').argument('<id>', 'user id', parseId), UPDATE_FIELDS))
    .addHelpText('after', '\nExamples:\n  $ gw user update 12 --group vip --role 10\n  $ echo "$NEW_PASSWORD" | gw user update 12 --password-stdin')
    .action(app.action(async (ctx, [id], o) => {
      const body = await bodyFrom(ctx, o, UPDATE_FIELDS);
      delete body.id;
      const pw = await password(ctx, o, false);
      if (pw !== undefined) body.password = pw;
      requireSome(body, 'update');
      const data = await ctx.client().call('PUT', '/api/user/', { body: { id, ...body } });
      ctx.print(data, () => `Updated user ${data.id} (${data.username}).\n`);
    }));

  for (const [name, verb] of [['enable', 'Enabled'], ['disable', 'Disabled']] as const) {
    group.command(name)
      .description(`${name[0]!.toUpperCase()}${name.slice(1)} a user${name === 'disable' ? ' (their keys and sessions stop working)' : ''}`)
      .argument('<id>', 'user id', parseId)
      .addHelpText('after', `\nExample:\n  $ gw user ${name} 12`)
      .action(app.action(async (ctx, [id]) => {
        const data = await ctx.client().call('POST', `/api/user/${id}/${name}`);
        ctx.print(data, () => `${verb} user ${id}.\n`);
      }));
  }

  group.command('reset-2fa')
    .description('Turn off two-factor authentication of a user below your role (lost authenticator)')
    .argument('<id>', 'user id', parseId)
    .addHelpText('after', '\nExample:\n  $ gw user reset-2fa 12')
    .action(app.action(async (ctx, [id]) => {
      const data = await ctx.client().call('POST', `/api/user/${id}/2fa/reset`);
      ctx.print(data, () => `Two-factor authentication of user ${id} is off.\n`);
    }));

  group.command('delete')
    .description('Delete a user')
    .argument('<id>', 'user id', parseId)
    .addHelpText('after', '\nExample:\n  $ gw user delete 12')
    .action(app.action(async (ctx, [id]) => {
      const data = await ctx.client().call('DELETE', `/api/user/${id}`);
      ctx.print(data, () => `Deleted user ${id}.\n`);
    }));
}
