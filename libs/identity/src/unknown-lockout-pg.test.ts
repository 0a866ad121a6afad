import { afterAll, beforeAll, expect, test } from 'bun:test';
import { sha256Hex } from '@gw/core';
import { openPgTestDb, requirePg, type PgTestDb } from '../../../tests/helpers/postgres';
import { PgNameLockouts } from './unknown-lockout-pg';
import { UnknownNameLockout } from './unknown-lockout';

const ok = await requirePg('unknown-name lockouts in PostgreSQL');
let t: PgTestDb;
beforeAll(async () => { if (ok) t = await openPgTestDb('gw_lockout', { max: 12 }); });
afterAll(async () => { if (ok) await t?.close(); });
const policy = { maxFailures: 3, lockSeconds: 10 };

test.skipIf(!ok)('claims from many nodes at once: as many pass as the in-process claim lets through, the rest get one lock', async () => {
  const nodes = [0, 1, 2].map(() => new PgNameLockouts(t.handle.sql, policy));
  const name = `claim-${Math.random()}`;
  const now = Date.now();
  const res = await Promise.all(Array.from({ length: 8 }, (_, i) => nodes[i % 3]!.claim(name, now)));
  const mem = new UnknownNameLockout(policy);
  const local = Array.from({ length: 8 }, () => mem.claim(name, now));
  // Concurrent claims are counted in the order they take the row's lock, not the order they were sent.
  const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
  expect(sorted(res)).toEqual(sorted(local));
  expect(res.filter((r) => r === 0).length).toBe(3);
  // The database holds the name's hash, never the name.
  const rows = await t.handle.sql<{ name_hash: string }[]>`select name_hash from name_lockouts`;
  expect(rows.map((r) => r.name_hash)).toContain(sha256Hex(name));
  expect(JSON.stringify(rows)).not.toContain('claim-');
});

test.skipIf(!ok)('the same sequence as the in-process counter: locks that double, then forgotten after the idle time', async () => {
  const idleMs = 60_000;
  const pg = new PgNameLockouts(t.handle.sql, policy, idleMs);
  const mem = new UnknownNameLockout(policy, 100, idleMs);
  const name = `seq-${Math.random()}`;
  let now = 1_800_000_000_000;
  // Claims every 4 s: the first lock (10 s), its end, the second (20 s), then a pause past the idle time.
  for (let i = 0; i < 20; i++, now += 4_000) expect([i, await pg.claim(name, now)]).toEqual([i, mem.claim(name, now)]);
  now += 20_000 + idleMs + 1;
  for (let i = 0; i < 4; i++, now += 1_000) expect([i, await pg.claim(name, now)]).toEqual([i, mem.claim(name, now)]);
});
