/**
 * Nodes starting at once on one empty PostgreSQL schema: each opens its own pool (migrations under the
 * advisory lock) and bootstraps the root. All pass the "no users yet" check together; exactly one may
 * create the root and print a password, the others must start normally.
 */
import { afterAll, describe, expect, test } from 'bun:test';
import { ROLE } from '@gw/db';
import { createPgStores, openPostgres, type PgHandle } from '@gw/db/pg';
import { bootstrapRoot } from '@gw/identity';
import { dropSchema, freshSchema, PG_TEST_URL, requirePg } from '../helpers/postgres';

const available = await requirePg('tests/cluster/root-bootstrap.test.ts');
const NODES = 5;
const schema = freshSchema('gw_rootboot');
const handles: PgHandle[] = [];

afterAll(async () => {
  await Promise.all(handles.map((h) => h.close()));
  if (available) await dropSchema(schema);
});

describe.skipIf(!available)('root bootstrap on PostgreSQL', () => {
  test(`${NODES} nodes bootstrapping one empty schema at once create one root, and one password is reported`, async () => {
    const results = await Promise.all(Array.from({ length: NODES }, async () => {
      const h = await openPostgres(PG_TEST_URL, { schema, max: 2 });
      handles.push(h);
      return bootstrapRoot(createPgStores(h.db).users, { username: 'root' });
    }));
    expect(results.filter((r) => r.created)).toHaveLength(1);
    expect(results.filter((r) => r.generatedPassword !== undefined)).toHaveLength(1);
    const users = createPgStores(handles[0]!.db).users;
    const all = await users.list({ offset: 0, limit: 10 });
    expect(all.items.map((u) => [u.username, u.role])).toEqual([['root', ROLE.root]]);
    // A later start finds the root and creates nothing.
    expect(await bootstrapRoot(users, { username: 'root' })).toEqual({ created: false });
  });
});
