/** `channel key`: a channel's upstream keys (`/api/channel/:id/keys`, admin). */
import type { Command } from 'commander';
import type { App } from '../core/context';
import { UsageError } from '../core/errors';
import { parseId } from '../core/fields';
import { col, statusName, table, time } from '../core/output';

const COLUMNS = [
  col('ID', 'id', { right: true }), col('KEY', 'key'), col('STATUS', 'status', { fmt: statusName }), col('REASON', 'reason'),
  col('DISABLED', 'disabled_at', { fmt: time }), col('REQUESTS', 'requests', { right: true }), col('FAILURES', 'failures', { right: true }),
  col('LAST USED', 'last_used_at', { fmt: time }),
];

export function registerChannelKey(channel: Command, app: App): void {
  const group = channel.command('key')
    .description("A channel's upstream keys: list (masked), add, remove, enable, disable")
    .addHelpText('after', '\nExamples:\n  $ gw channel key list 3\n  $ printf "%s\\n" "$K1" "$K2" | gw channel key add 3 --stdin');

  group.command('list')
    .description('List the keys of a channel, masked, with status and counters')
    .argument('<id>', 'channel id', parseId)
    .addHelpText('after', '\nExamples:\n  $ gw channel key list 3\n  $ gw channel key list 3 --json | jq \'.[] | select(.status == 3)\'')
    .action(app.action(async (ctx, [id]) => {
      const data = await ctx.client().call('GET', `/api/channel/${id}/keys`);
      ctx.print(data, () => table(data, COLUMNS));
    }));

  group.command('add')
    .description('Add upstream keys to a channel, one per line on stdin (flags would show keys in ps and history)')
    .argument('<id>', 'channel id', parseId)
    .requiredOption('--stdin', 'read the keys from stdin, one per line')
    .addHelpText('after', '\nExample:\n  $ printf "%s\\n" "$KEY_2" "$KEY_3" | gw channel key add 3 --stdin')
    .action(app.action(async (ctx, [id]) => {
      const keys = (await ctx.io.readStdin()).split(/\r?\n/).map((l) => l.trim()).filter(Boolean);
      if (!keys.length) throw new UsageError('--stdin: no key given');
      const data = await ctx.client().call('POST', `/api/channel/${id}/keys`, { body: { keys } });
      ctx.print(data, () => `Added ${keys.length} key(s) to channel ${id}; it now holds ${data.length}.\n`);
    }));

  group.command('remove')
    .description('Remove one key (a channel keeps at least one)')
    .argument('<id>', 'channel id', parseId)
    .argument('<keyId>', 'key id (see `channel key list`)', parseId)
    .addHelpText('after', '\nExample:\n  $ gw channel key remove 3 2')
    .action(app.action(async (ctx, [id, keyId]) => {
      const data = await ctx.client().call('DELETE', `/api/channel/${id}/keys/${keyId}`);
      ctx.print(data, () => `Removed key ${keyId} from channel ${id}.\n`);
    }));

  for (const [name, verb] of [['enable', 'Enabled'], ['disable', 'Disabled']] as const) {
    group.command(name)
      .description(name === 'enable' ? 'Enable a key (also an auto-disabled one)' : "Disable a key (an operator's decision: the prober leaves it alone)")
      .argument('<id>', 'channel id', parseId)
      .argument('<keyId>', 'key id', parseId)
      .addHelpText('after', `\nExample:\n  $ gw channel key ${name} 3 2`)
      .action(app.action(async (ctx, [id, keyId]) => {
        const data = await ctx.client().call('POST', `/api/channel/${id}/keys/${keyId}/${name}`);
        ctx.print(data, () => `${verb} key ${keyId} of channel ${id}.\n`);
      }));
  }
}
