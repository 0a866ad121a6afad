/**
 * Three real processes started at once on an empty schema, without ROOT_PASSWORD: all start, the
 * migrations are applied once, exactly one creates the root and prints its generated password, and
 * that password works on every node. root-bootstrap.test.ts races five pools in one process; this is
 * the same through the real start-up (migration lock, bootstrap, change feed, leader) of separate processes.
 */
import { afterAll, describe, expect, test } from 'bun:test';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startCluster, type Cluster } from '../helpers/cluster';
import { loginToken } from '../helpers/gateway-process';
import { requirePg } from '../helpers/postgres';
import { requireRedis } from '../helpers/redis';

const ready = (await requirePg('tests/cluster/startup.test.ts')) && (await requireRedis('tests/cluster/startup.test.ts'));
let c: Cluster | undefined;
afterAll(async () => {
  await c?.stop();
});

describe.skipIf(!ready)('nodes starting together on an empty schema', () => {
  test('3 processes at once: migrations applied once, one root created, its one printed password works everywhere', async () => {
    c = await startCluster({ rootPassword: false });
    const created = c.nodes.filter((n) => /root\.created/.test(n.output()));
    expect(created).toHaveLength(1);
    const password = /root\.created .*password=(\S+)/.exec(created[0]!.output())?.[1];
    expect(password?.length).toBeGreaterThanOrEqual(8);
    for (const n of c.nodes) expect(n.output()).not.toContain('root.password_ignored');

    const users = await c.sql`select username, role from users`;
    expect(users.map((u) => u.username)).toEqual(['root']);
    const journal = JSON.parse(readFileSync(join(import.meta.dir, '..', '..', 'drizzle', 'pg', 'meta', '_journal.json'), 'utf8'));
    const [m] = await c.sql`select count(*)::int as n from __drizzle_migrations`;
    expect(m!.n).toBe(journal.entries.length);

    for (const n of c.nodes) expect((await loginToken(n.url, 'root', password!)).startsWith('gwm_')).toBe(true);
  }, 60_000);
});
