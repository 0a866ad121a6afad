/** Admin CRUD of groups (price ratio, routing fallbacks, group limits): thin handlers over GroupService. */
import { Elysia, t } from 'elysia';
import { ok } from '@gw/core';
import { GroupCreate, GroupUpdate, GroupView } from '@gw/relay';
import { authPlugin } from '../plugins/auth';
import type { Services } from '../services';
import { envelope, idParams, idInput } from './envelope';

const tags = ['group'];

export const groupRoutes = (s: Services) =>
  new Elysia({ name: 'group-routes', prefix: '/api/group' })
    .use(authPlugin(s))
    .get('/', async () => ok(await s.relay.groups.list()), {
      role: 'admin', response: envelope(t.Array(GroupView)),
      detail: { tags, summary: 'List groups', description: 'Every group record. A group name used by users or keys without a record is ×1 (ratio 1000), no fallbacks, no limits.' },
    })
    .get('/:id', async ({ params }) => ok(await s.relay.groups.get(params.id)), {
      role: 'admin', params: idParams, response: envelope(GroupView), detail: { tags, summary: 'Get a group', description: 'One group (404 group_not_found).' },
    })
    .post('/', async ({ body }) => ok(await s.relay.groups.create(body)), {
      role: 'admin', body: GroupCreate, response: envelope(GroupView),
      detail: { tags, summary: 'Create a group', description: 'A group: `ratio` in per-mille (1000 = ×1) multiplies every cost of its requests inside the one rounding; `fallbacks` are tried in order when the group has no healthy channel for a model; limits apply to all its requests together (0 = unlimited). A taken name is 409 group_exists.' },
    })
    .put('/', async ({ body }) => ok(await s.relay.groups.update(body)), {
      role: 'admin', body: GroupUpdate, response: envelope(GroupView),
      detail: { tags, summary: 'Update a group', description: '`id` plus any fields; the name cannot change (users and keys refer to it). Applies to the next request.' },
    })
    .delete('/:id', async ({ params }) => {
      await s.relay.groups.delete(params.id);
      return ok(null);
    }, { role: 'admin', params: idParams, response: envelope(t.Null()), detail: { tags, summary: 'Delete a group', description: 'Removes the record: its users and keys keep the name and are billed ×1 with no fallbacks or group limits.' } });
