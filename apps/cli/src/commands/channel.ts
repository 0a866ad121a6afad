/** `channel`: upstream channels (`/api/channel/`, admin). */
import { Option, type Command } from 'commander';
import type { App, Ctx } from '../core/context';
import { UsageError } from '../core/errors';
import { addFields, addPaging, bodyFrom, pagingQuery, parseId, requireFields, requireSome, type Field } from '../core/fields';
import { col, details, pageText, statusName, time } from '../core/output';
import { registerChannelKey } from './channel-key';

const FIELDS: Field[] = [
  { name: 'name', kind: 'string', desc: 'display name' },
  { name: 'type', kind: 'string', desc: "adapter: 'anthropic' or 'openai'" },
  { name: 'base_url', kind: 'string', desc: 'upstream origin without /v1, e.g. https://api.anthropic.com' },
  { name: 'key', kind: 'string', desc: 'upstream API key (prefer --key-stdin: flags show in ps and history)' },
  { name: 'models', kind: 'list', desc: 'comma-separated models the channel serves' },
  { name: 'model_mapping', kind: 'json', desc: 'JSON object: requested model → upstream model' },
  { name: 'group', kind: 'string', desc: 'comma-separated user groups allowed to use it' },
  { name: 'tag', kind: 'string', desc: 'free-form tag for enable-tag/disable-tag' },
  { name: 'priority', kind: 'int', desc: 'higher is tried first' },
  { name: 'weight', kind: 'int', desc: 'share among channels of equal priority' },
  { name: 'status', kind: 'int', desc: '1 enabled, 2 disabled' },
  { name: 'timeout_ms', kind: 'int', desc: 'upstream timeout in milliseconds' },
  { name: 'headers', kind: 'json', desc: 'JSON object of extra upstream headers' },
  { name: 'key_selection', kind: 'string', desc: "how a request picks one of the channel's keys: 'random' (default) or 'round_robin'" },
  { name: 'failure_rules', kind: 'json', desc: 'JSON: when failures auto-disable the channel, e.g. \'{"statuses":"500-599,408","keywords":["suspended"],"failures":2,"window_requests":5,"window_seconds":60}\' ({} = defaults)' },
  { name: 'first_byte_timeout_ms', kind: 'int', desc: "longest wait for the upstream's first byte before failing over (ms)" },
  { name: 'probe_interval_ms', kind: 'int', desc: 'probe interval of this channel while auto-disabled (ms; default the global one)' },
  { name: 'overrides', kind: 'json', desc: 'JSON list of parameter/header overrides applied in order, e.g. \'[{"op":"clamp","path":"max_tokens","max":4096},{"op":"remove","path":"temperature","models":["o3*"]},{"op":"set_header","name":"x-team","value":"blue"}]\' (ops: set, remove, clamp, set_header, remove_header; replaces the list; [] clears it)' },
  { name: 'billing_model', kind: 'string', desc: "which model's price bills requests: 'requested' (default) or 'upstream' (the model_mapping target)" },
  { name: 'reasoning_echo', kind: 'string', desc: "openai channels: send thinking back as reasoning_content: 'auto' (default: DeepSeek and Moonshot hosts), 'always' or 'never'" },
  { name: 'header_policy', kind: 'json', desc: 'JSON: which client headers reach the upstream, e.g. \'{"forward_headers":["user-agent"],"beta_strip":["b"],"beta_rewrite":{"a":"a2"},"allow_service_tier":false}\' (replaces the whole policy)' },
];

const COLUMNS = [
  col('ID', 'id', { right: true }), col('NAME', 'name'), col('TYPE', 'type'), col('STATUS', 'status', { fmt: statusName }),
  col('PRI', 'priority', { right: true }), col('WEIGHT', 'weight', { right: true }), col('GROUP', 'group'), col('TAG', 'tag'),
  { header: 'MODELS', get: (c: any) => (c.models?.length > 3 ? `${c.models.slice(0, 3).join(',')},… (${c.models.length})` : c.models) },
  col('RESP MS', 'response_time_ms', { right: true }), col('TESTED', 'tested_at', { fmt: time }),
];

const channelDetails = (c: any) => details([
  ['id', c.id], ['name', c.name], ['type', c.type], ['base url', c.base_url], ['key', c.key],
  ['models', c.models], ['model mapping', c.model_mapping], ['group', c.group], ['tag', c.tag],
  ['priority', c.priority], ['weight', c.weight],
  ['status', `${statusName(c.status)}${c.status_reason ? ` (${c.status_reason})` : ''}`],
  ['keys', `${c.usable_keys}/${c.key_count} usable, ${c.key_selection}`], ['failure rules', JSON.stringify(c.failure_rules ?? {})],
  ['first byte timeout ms', c.first_byte_timeout_ms], ['probe interval ms', c.probe_interval_ms],
  ['timeout ms', c.timeout_ms], ['headers', Object.keys(c.headers ?? {})], ['header policy', JSON.stringify(c.header_policy ?? {})],
  ['overrides', JSON.stringify(c.overrides ?? [])], ['billing model', c.billing_model], ['reasoning echo', c.reasoning_echo],
  ['response ms', c.response_time_ms], ['tested', time(c.tested_at)], ['created', time(c.created_at)], ['updated', time(c.updated_at)],
]);

export function registerChannel(program: Command, app: App): void {
  const group = program.command('channel')
    .description('Upstream channels (admin)')
    .addHelpText('after', '\nExamples:\n  $ gw channel list --type anthropic --status 1\n  $ gw channel test 3');

  addPaging(group.command('list')
    .description('List channels, optionally filtered')
    .addOption(new Option('--status <n>', '1 enabled, 2 disabled, 3 auto-disabled').argParser(parseId))
    .option('--tag <tag>', 'only this tag')
    .option('--type <type>', "only this adapter type ('anthropic' or 'openai')")
    .option('--model <model>', 'only channels serving this model')
    .option('--group <group>', 'only channels open to this user group')
    .option('--keyword <text>', 'substring of the name'))
    .addHelpText('after', '\nExamples:\n  $ gw channel list --tag prod --page-size 100\n  $ gw channel list --model claude-sonnet-4 --json | jq \'.items[].id\'')
    .action(app.action(async (ctx, _a, o) => {
      const data = await ctx.client().call('GET', '/api/channel/', {
        query: { ...pagingQuery(o), status: o.status, tag: o.tag, type: o.type, model: o.model, group: o.group, keyword: o.keyword },
      });
      ctx.print(data, () => pageText(data, COLUMNS));
    }));

  group.command('get')
    .description('Show one channel (its key masked)')
    .argument('<id>', 'channel id', parseId)
    .addHelpText('after', '\nExample:\n  $ gw channel get 3')
    .action(app.action(async (ctx, [id]) => {
      const data = await ctx.client().call('GET', `/api/channel/${id}`);
      ctx.print(data, () => channelDetails(data));
    }));

  addFields(group.command('create').description('Create a channel'), FIELDS)
    .option('--key-stdin', 'read the upstream key from the first line of stdin')
    .addHelpText('after', `
Examples:
  $ echo "$ANTHROPIC_KEY" | gw channel create --name main --type anthropic \\
      --base-url https://api.anthropic.com --models claude-sonnet-4,claude-haiku-4 --key-stdin
  $ gw channel create --json-body channel.json --tag prod`)
    .action(app.action(async (ctx, _a, o) => {
      const body = await channelBody(ctx, o);
      requireFields(body, ['name', 'type', 'base_url', 'key', 'models']);
      const data = await ctx.client().call('POST', '/api/channel/', { body });
      ctx.print(data, () => `Created channel ${data.id} (${data.name}).\n`);
    }));

  addFields(group.command('update').description('Change some fields of a channel; omitted fields (and the key) stay').argument('<id>', 'channel id', parseId), FIELDS)
    .option('--key-stdin', 'read the new upstream key from the first line of stdin')
    .addHelpText('after', '\nExamples:\n  $ gw channel update 3 --priority 10 --weight 5\n  $ gw channel update 3 --model-mapping \'{"claude-sonnet-4":"claude-sonnet-4-20250514"}\'')
    .action(app.action(async (ctx, [id], o) => {
      const body = await channelBody(ctx, o);
      delete body.id;
      requireSome(body, 'update');
      const data = await ctx.client().call('PUT', '/api/channel/', { body: { id, ...body } });
      ctx.print(data, () => `Updated channel ${data.id} (${data.name}).\n`);
    }));

  group.command('delete')
    .description('Delete a channel')
    .argument('<id>', 'channel id', parseId)
    .addHelpText('after', '\nExample:\n  $ gw channel delete 3')
    .action(app.action(async (ctx, [id]) => {
      const data = await ctx.client().call('DELETE', `/api/channel/${id}`);
      ctx.print(data, () => `Deleted channel ${id}.\n`);
    }));

  group.command('batch-delete')
    .description('Delete several channels at once')
    .argument('<ids...>', 'channel ids', (v: string, prev: number[] = []) => [...prev, parseId(v)])
    .addHelpText('after', '\nExample:\n  $ gw channel batch-delete 3 4 9')
    .action(app.action(async (ctx, [ids]) => {
      const data = await ctx.client().call('POST', '/api/channel/batch', { body: { ids } });
      ctx.print(data, () => `Deleted ${data.deleted} channel(s).\n`);
    }));

  for (const [name, path, verb] of [['enable-tag', 'enabled', 'Enabled'], ['disable-tag', 'disabled', 'Disabled']] as const) {
    group.command(name)
      .description(`${verb.replace(/d$/, '')} every channel with a tag`)
      .argument('<tag>', 'the tag')
      .addHelpText('after', `\nExample:\n  $ gw channel ${name} prod`)
      .action(app.action(async (ctx, [tag]) => {
        const data = await ctx.client().call('POST', `/api/channel/tag/${path}`, { body: { tag } });
        ctx.print(data, () => `${verb} ${data.updated} channel(s) tagged '${tag}'.\n`);
      }));
  }

  group.command('test')
    .description('Send a small test request through a channel; exits 1 when the upstream test fails')
    .argument('<id>', 'channel id', parseId)
    .option('--model <model>', 'model to test (default: the first the channel serves)')
    .addHelpText('after', '\nExamples:\n  $ gw channel test 3 && echo healthy\n  $ gw channel test 3 --model claude-haiku-4 --json')
    .action(app.action(async (ctx, [id], o) => {
      // The server waits for the upstream (up to the channel's timeout), so allow longer than usual.
      const data = await ctx.client({ timeoutMs: 300_000 }).call('POST', `/api/channel/${id}/test`, { query: { model: o.model } });
      ctx.print(data, () => details([
        ['result', data.success ? 'ok' : 'FAILED'], ['upstream status', data.status], ['response ms', data.response_time_ms],
        ['message', data.message], ['tested', time(data.tested_at)],
      ]));
      if (data.success) return 0;
      ctx.note(`error: channel ${id} failed the test: ${data.message || `upstream status ${data.status}`}\n`);
      return 1;
    }));

  registerChannelKey(group, app);
}

/** Fields plus `--key-stdin`, which would fight with `--json-body -` over stdin. */
async function channelBody(ctx: Ctx, o: Record<string, any>) {
  if (o.keyStdin && o.jsonBody === '-') throw new UsageError('--key-stdin and --json-body - both want stdin; use a file for --json-body');
  if (o.keyStdin && o.key !== undefined) throw new UsageError('use either --key or --key-stdin, not both');
  const body = await bodyFrom(ctx, o, FIELDS);
  if (o.keyStdin) {
    const key = (await ctx.io.readStdin()).split(/\r?\n/)[0]?.trim();
    if (!key) throw new UsageError('--key-stdin: stdin is empty');
    body.key = key;
  }
  return body;
}
