/** A channel's upstream keys (admin): thin handlers over ChannelKeyService. */
import { Elysia, t } from 'elysia';
import { ok } from '@gw/core';
import { ChannelKeysAdd, ChannelKeyView } from '@gw/channels';
import { authPlugin } from '../plugins/auth';
import type { Services } from '../services';
import { envelope, idParams, idInput } from './envelope';

const keyParams = t.Object({ id: idInput(), keyId: idInput() });
const tags = ['channel'];

export const channelKeyRoutes = (s: Services) =>
  new Elysia({ name: 'channel-key-routes', prefix: '/api/channel' })
    .use(authPlugin(s))
    .get('/:id/keys', async ({ params }) => ok(await s.channelKeys.list(params.id)), {
      role: 'admin', params: idParams, response: envelope(t.Array(ChannelKeyView)),
      detail: { tags, summary: 'List channel keys', description: 'Every upstream key of the channel, masked, with its status (1 enabled, 2 disabled by an operator, 3 auto-disabled with reason and time) and counters since the process started. Key 1 is the channel\'s `key`.' },
    })
    .post('/:id/keys', async ({ params, body }) => ok(await s.channelKeys.add(params.id, body.keys)), {
      role: 'admin', params: idParams, body: ChannelKeysAdd, response: envelope(t.Array(ChannelKeyView)),
      detail: { tags, summary: 'Add channel keys', description: 'Adds upstream keys (sealed at rest, enabled). A channel auto-disabled for want of a usable key is enabled again. Answers every key, masked. At most 100 keys per channel (409 `too_many_channel_keys`).' },
    })
    .delete('/:id/keys/:keyId', async ({ params }) => {
      await s.channelKeys.remove(params.id, params.keyId);
      return ok(null);
    }, {
      role: 'admin', params: keyParams, response: envelope(t.Null()),
      detail: { tags, summary: 'Remove a channel key', description: 'Removes one key. The last key cannot be removed (409 `last_channel_key`). Removing key 1 makes the next key the channel\'s `key`.' },
    })
    .post('/:id/keys/:keyId/enable', async ({ params }) => ok(await s.channelKeys.setByOperator(params.id, params.keyId, 1)), {
      role: 'admin', params: keyParams, response: envelope(ChannelKeyView),
      detail: { tags, summary: 'Enable a channel key', description: 'Enables a key disabled by an operator or auto-disabled.' },
    })
    .post('/:id/keys/:keyId/disable', async ({ params }) => ok(await s.channelKeys.setByOperator(params.id, params.keyId, 2)), {
      role: 'admin', params: keyParams, response: envelope(ChannelKeyView),
      detail: { tags, summary: 'Disable a channel key', description: 'Disables a key as an operator\'s decision (never re-enabled by the prober). When no usable key is left the channel is auto-disabled.' },
    });
