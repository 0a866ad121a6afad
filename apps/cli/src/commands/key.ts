/** `key`: relay API keys (`sk-…`, `/api/token/`): the caller's own, or another user's for admins. */
import { Option, type Command } from 'commander';
import type { App } from '../core/context';
import { addFields, addPaging, bodyFrom, pagingQuery, parseId, requireFields, requireSome, type Field } from '../core/fields';
import { col, details, pageText, statusName, time } from '../core/output';
import { LIMIT_FIELDS, limitRows } from './limit-fields';

const FIELDS: Field[] = [
  { name: 'name', kind: 'string', desc: 'a label for the key' },
  { name: 'expires_at', kind: 'time', desc: "expiry: unix seconds or ISO date/time; 'never' clears it" },
  { name: 'unlimited_quota', kind: 'bool', desc: 'not limited by remain-quota' },
  { name: 'remain_quota', kind: 'int', desc: 'quota the key may still spend (when not unlimited)' },
  { name: 'models', kind: 'list', desc: "comma-separated allowed models ('' = any model of the group)" },
  { name: 'allow_ips', kind: 'list', desc: "comma-separated allowed client IPs/CIDRs ('' = any)" },
  { name: 'group', kind: 'string', desc: "routing group (default: the owner's group)" },
  ...LIMIT_FIELDS,
];
const UPDATE_FIELDS: Field[] = [...FIELDS, { name: 'status', kind: 'int', desc: '1 enabled, 2 disabled' }];
const CREATE_FIELDS: Field[] = [...FIELDS, { name: 'user_id', kind: 'int', desc: 'owner (admins only; default: yourself)' }];

const COLUMNS = [
  col('ID', 'id', { right: true }), col('NAME', 'name'), col('PREFIX', 'prefix'), col('USER', 'user_id', { right: true }),
  col('STATUS', 'status', { fmt: statusName }),
  { header: 'REMAIN', right: true, get: (k: any) => (k.unlimited_quota ? 'unlimited' : k.remain_quota) },
  col('USED', 'used_quota', { right: true }), col('MODELS', 'models'), col('EXPIRES', 'expires_at', { fmt: time }),
  col('LAST USED', 'last_used_at', { fmt: time }),
];

const keyDetails = (k: any) => details([
  ['id', k.id], ['name', k.name], ['prefix', k.prefix], ['user', k.user_id], ['status', statusName(k.status)],
  ['remain quota', k.unlimited_quota ? 'unlimited' : k.remain_quota], ['used quota', k.used_quota], ['models', k.models],
  ['allow ips', k.allow_ips], ['group', k.group], ...limitRows(k), ['expires', time(k.expires_at)],
  ['created', time(k.created_at)], ['last used', time(k.last_used_at)],
]);

export function registerKey(program: Command, app: App): void {
  const group = program.command('key')
    .description('Relay API keys (sk-…) used on /v1/; yours, or any user\'s for admins')
    .addHelpText('after', '\nExamples:\n  $ gw key create --name laptop --models claude-sonnet-4\n  $ gw key list --user-id 12');

  addPaging(group.command('list')
    .description('List API keys (masked)')
    .addOption(new Option('--user-id <id>', 'another user\'s keys (admins)').argParser(parseId))
    .option('--keyword <text>', 'substring of the name')
    .addOption(new Option('--status <n>', '1 enabled, 2 disabled').argParser(parseId)))
    .addHelpText('after', '\nExample:\n  $ gw key list --json | jq \'.items[] | {id, name}\'')
    .action(app.action(async (ctx, _a, o) => {
      const data = await ctx.client().call('GET', '/api/token/', { query: { ...pagingQuery(o), user_id: o.userId, keyword: o.keyword, status: o.status } });
      ctx.print(data, () => pageText(data, COLUMNS));
    }));

  group.command('get')
    .description('Show one API key (masked)')
    .argument('<id>', 'key id', parseId)
    .addHelpText('after', '\nExample:\n  $ gw key get 4')
    .action(app.action(async (ctx, [id]) => {
      const data = await ctx.client().call('GET', `/api/token/${id}`);
      ctx.print(data, () => keyDetails(data));
    }));

  addFields(group.command('create').description('Create an API key; the full key is printed once on stdout (notes on stderr)'), CREATE_FIELDS)
    .addHelpText('after', '\nExamples:\n  $ gw key create --name ci --remain-quota 100000 --unlimited-quota false --expires-at 2027-01-01\n  $ export ANTHROPIC_API_KEY=$(gw key create --name laptop)')
    .action(app.action(async (ctx, _a, o) => {
      const body = await bodyFrom(ctx, o, CREATE_FIELDS);
      requireFields(body, ['name']);
      const data = await ctx.client().call('POST', '/api/token/', { body });
      if (ctx.json) ctx.print(data, () => '');
      else {
        ctx.note(`Created API key ${data.id}${data.name ? ` (${data.name})` : ''}. The key is shown only now; store it safely:\n`);
        ctx.secretLines([data.key]);
      }
    }));

  addFields(group.command('update').description('Change some fields of an API key').argument('<id>', 'key id', parseId), UPDATE_FIELDS)
    .addHelpText('after', '\nExamples:\n  $ gw key update 4 --status 2\n  $ gw key update 4 --models claude-sonnet-4,claude-haiku-4 --rate-limit-rpm 60')
    .action(app.action(async (ctx, [id], o) => {
      const body = await bodyFrom(ctx, o, UPDATE_FIELDS);
      delete body.id;
      requireSome(body, 'update');
      const data = await ctx.client().call('PUT', '/api/token/', { body: { id, ...body } });
      ctx.print(data, () => `Updated API key ${data.id}.\n`);
    }));

  group.command('delete')
    .alias('revoke')
    .description('Delete (revoke) an API key; it stops working at once')
    .argument('<id>', 'key id', parseId)
    .addHelpText('after', '\nExample:\n  $ gw key revoke 4')
    .action(app.action(async (ctx, [id]) => {
      const data = await ctx.client().call('DELETE', `/api/token/${id}`);
      ctx.print(data, () => `Deleted API key ${id}.\n`);
    }));
}
