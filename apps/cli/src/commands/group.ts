/** `group`: groups (`/api/group/`, admin): price ratio, routing fallbacks and group-wide limits. */
import type { Command } from 'commander';
import type { App } from '../core/context';
import { addFields, bodyFrom, parseId, requireFields, requireSome, type Field } from '../core/fields';
import { col, details, table, time } from '../core/output';
import { LIMIT_FIELDS, limitRows } from './limit-fields';

const FIELDS: Field[] = [
  { name: 'description', kind: 'string', desc: 'free text' },
  { name: 'ratio', kind: 'int', desc: 'price ratio in per-mille: 1000 = x1, 1500 = x1.5' },
  { name: 'fallbacks', kind: 'list', desc: "comma-separated groups tried in order when this one has no healthy channel for a model ('' = none)" },
  ...LIMIT_FIELDS,
];
const CREATE_FIELDS: Field[] = [{ name: 'name', kind: 'string', desc: 'group name as users and keys name it (required)' }, ...FIELDS];

const COLUMNS = [
  col('ID', 'id', { right: true }), col('NAME', 'name'), col('RATIO', 'ratio', { right: true }), col('FALLBACKS', 'fallbacks'),
  col('RPM', 'rate_limit_rpm', { right: true }), col('TPM', 'rate_limit_tpm', { right: true }), col('CONCURRENCY', 'max_concurrency', { right: true }),
  col('UPDATED', 'updated_at', { fmt: time }),
];

const groupDetails = (g: any) => details([
  ['id', g.id], ['name', g.name], ['description', g.description], ['ratio', g.ratio], ['fallbacks', g.fallbacks],
  ...limitRows(g), ['created', time(g.created_at)], ['updated', time(g.updated_at)],
]);

export function registerGroup(program: Command, app: App): void {
  const group = program.command('group')
    .description('Groups (admin): price ratio, fallbacks and limits shared by their users and keys')
    .addHelpText('after', '\nExamples:\n  $ gw group create --name gold --ratio 1500 --fallbacks default --max-concurrency 20\n  $ gw group list');

  group.command('list')
    .description('List groups')
    .addHelpText('after', '\nExample:\n  $ gw group list --json')
    .action(app.action(async (ctx) => {
      const data = await ctx.client().call('GET', '/api/group/');
      ctx.print(data, () => table(data, COLUMNS));
    }));

  group.command('get')
    .description('Show one group')
    .argument('<id>', 'group id', parseId)
    .addHelpText('after', '\nExample:\n  $ gw group get 2')
    .action(app.action(async (ctx, [id]) => {
      const data = await ctx.client().call('GET', `/api/group/${id}`);
      ctx.print(data, () => groupDetails(data));
    }));

  addFields(group.command('create').description('Create a group'), CREATE_FIELDS)
    .addHelpText('after', '\nExample:\n  $ gw group create --name gold --ratio 1500 --rate-limit-rpm 600')
    .action(app.action(async (ctx, _a, o) => {
      const body = await bodyFrom(ctx, o, CREATE_FIELDS);
      requireFields(body, ['name']);
      const data = await ctx.client().call('POST', '/api/group/', { body });
      ctx.print(data, () => `Created group ${data.id} (${data.name}).\n`);
    }));

  addFields(group.command('update').description('Change some fields of a group (not its name)').argument('<id>', 'group id', parseId), FIELDS)
    .addHelpText('after', '\nExample:\n  $ gw group update 2 --ratio 1200 --fallbacks default,backup')
    .action(app.action(async (ctx, [id], o) => {
      const body = await bodyFrom(ctx, o, FIELDS);
      requireSome(body, 'update');
      const data = await ctx.client().call('PUT', '/api/group/', { body: { id, ...body } });
      ctx.print(data, () => `Updated group ${data.id}.\n`);
    }));

  group.command('delete')
    .description('Delete a group record (its users and keys are then billed x1, without fallbacks or group limits)')
    .argument('<id>', 'group id', parseId)
    .addHelpText('after', '\nExample:\n  $ gw group delete 2')
    .action(app.action(async (ctx, [id]) => {
      const data = await ctx.client().call('DELETE', `/api/group/${id}`);
      ctx.print(data, () => `Deleted group ${id}.\n`);
    }));
}
