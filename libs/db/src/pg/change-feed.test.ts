import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import postgres from 'postgres';
import { BatchedRefresh, ChangeBus, memoryLogger, type ChangeEvents, type ResyncReason } from '@gw/core';
import { openPostgres, type PgHandle } from './client';
import { PgChangeFeed } from './change-feed';
import { tcpProxy } from '../../../../tests/helpers/tcp-proxy';
import { PG_TEST_URL, dropSchema, freshSchema, requirePg } from '../../../../tests/helpers/postgres';

const available = await requirePg('libs/db/src/pg/change-feed.test.ts');
const schema = freshSchema('gw_feed');
const otherSchema = freshSchema('gw_feed_other');
const appName = `gw-feed-test-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;

type Seen = { [K in keyof ChangeEvents]: { event: K; payload: ChangeEvents[K] } }[keyof ChangeEvents];
const seen: Seen[] = [];
const resyncs: ResyncReason[] = [];
let h: PgHandle;
let other: PgHandle;
let feed: PgChangeFeed;
let sql: postgres.Sql;

beforeAll(async () => {
  if (!available) return;
  [h, other] = await Promise.all([openPostgres(PG_TEST_URL, { schema, max: 2 }), openPostgres(PG_TEST_URL, { schema: otherSchema, max: 1 })]);
  sql = h.sql;
  const bus = new ChangeBus();
  for (const event of ['user.changed', 'apikey.changed', 'channel.changed', 'price.changed', 'group.changed', 'balance.changed'] as const) {
    bus.on(event, (payload: any) => void seen.push({ event, payload } as Seen));
  }
  feed = await PgChangeFeed.start({ url: PG_TEST_URL, schema, bus, onResync: (r) => void resyncs.push(r), resyncMs: 60_000, applicationName: appName });
});

afterAll(async () => {
  if (!available) return;
  await feed?.close();
  await Promise.all([h?.close(), other?.close()]);
  await Promise.all([dropSchema(schema), dropSchema(otherSchema)]);
});

/** Polls every 5 ms until `cond` holds; returns the milliseconds it took (fails after `ms`). */
async function within(ms: number, cond: () => boolean): Promise<number> {
  const t0 = performance.now();
  while (!cond()) {
    if (performance.now() - t0 > ms) throw new Error(`condition not met within ${ms} ms`);
    await Bun.sleep(5);
  }
  return performance.now() - t0;
}

let markers = 0;
/**
 * Notifications arrive in commit order: once a marker committed after `write` has arrived, anything
 * `write` notified has arrived too. Returns the events that arrived before the marker.
 */
async function eventsOf(write: () => Promise<unknown>): Promise<Seen[]> {
  const from = seen.length;
  await write();
  const marker = `marker-${++markers}`;
  await sql`insert into prices (model, updated_at) values (${marker}, 1)`;
  await within(1_000, () => seen.slice(from).some((e) => e.event === 'price.changed' && e.payload.model === marker));
  const got = seen.slice(from);
  return got.slice(0, got.findIndex((e) => e.event === 'price.changed' && e.payload.model === marker));
}

async function insertUser(name: string): Promise<number> {
  const [u] = await sql<{ id: number }[]>`insert into users (username, password_hash, created_at, updated_at) values (${name}, 'x', 1, 1) returning id`;
  return Number(u!.id);
}

/** A user whose own insert notification has already arrived (so it cannot count as a later event). */
async function newUser(name: string): Promise<number> {
  let id = 0;
  await eventsOf(async () => (id = await insertUser(name)));
  return id;
}

describe.skipIf(!available)('PgChangeFeed', () => {
  test('the first LISTEN runs one resync', () => {
    expect(resyncs).toEqual(['listen']);
    expect(feed.listening).toBe(true);
  });

  test('users: insert, update of a cached field and delete each arrive as user.changed within 1 s', async () => {
    let id = 0;
    const t0 = performance.now();
    expect(await eventsOf(async () => (id = await insertUser('feed-u1')))).toEqual([{ event: 'user.changed', payload: { userId: id } }]);
    const ms = performance.now() - t0;
    expect(ms).toBeLessThan(1_000);
    expect(await eventsOf(() => sql`update users set status = 2, updated_at = 2 where id = ${id}`)).toEqual([{ event: 'user.changed', payload: { userId: id } }]);
    expect(await eventsOf(() => sql`update users set "group" = 'vip' where id = ${id}`)).toEqual([{ event: 'user.changed', payload: { userId: id } }]);
    expect(await eventsOf(() => sql`delete from users where id = ${id}`)).toEqual([{ event: 'user.changed', payload: { userId: id } }]);
  });

  test('users: a charge and login bookkeeping do not notify', async () => {
    const id = await newUser('feed-u2');
    expect(await eventsOf(() => sql`update users set quota = quota - 7, used_quota = used_quota + 7, request_count = request_count + 1, updated_at = 99 where id = ${id}`)).toEqual([]);
    expect(await eventsOf(() => sql`update users set failed_logins = 3, lock_count = 1, locked_until = 123, totp_last_step = 5 where id = ${id}`)).toEqual([]);
    // An update that changes nothing at all does not notify either.
    expect(await eventsOf(() => sql`update users set status = status where id = ${id}`)).toEqual([]);
  });

  test('ledger: a top-up, adjust, redeem, clawback or reinstate announces the user; a charge does not', async () => {
    const id = await newUser('feed-u3');
    const entry = (kind: string, ref: string, amount: number) => sql.begin(async (tx) => {
      const [u] = await tx<{ quota: number }[]>`update users set quota = quota + ${amount}, updated_at = 5 where id = ${id} returning quota`;
      await tx`insert into ledger (user_id, kind, amount, balance_after, ref, created_at) values (${id}, ${kind}, ${amount}, ${u!.quota}, ${ref}, 5)`;
    });
    for (const kind of ['topup', 'adjust', 'redeem', 'clawback', 'reinstate']) {
      expect(await eventsOf(() => entry(kind, `r-${kind}`, 100))).toEqual([{ event: 'user.changed', payload: { userId: id } }]);
    }
    expect(await eventsOf(() => entry('charge', 'req-1', -10))).toEqual([]);
  });

  test('api_keys: insert, revoke, operator budget change and delete notify; a charge does not', async () => {
    const owner = await newUser('feed-u4');
    let id = 0;
    const insert = async () => {
      const [k] = await sql<{ id: number }[]>`insert into api_keys (user_id, key_hash, prefix, unlimited_quota, remain_quota, created_at, updated_at)
        values (${owner}, ${'h-' + owner}, 'p', false, 1000, 1, 1) returning id`;
      id = Number(k!.id);
    };
    expect(await eventsOf(insert)).toEqual([{ event: 'apikey.changed', payload: { keyId: id } }]);
    // The settlement's key update: used up, remain down by the same cost, last use.
    expect(await eventsOf(() => sql`update api_keys set used_quota = used_quota + 40,
      remain_quota = case when unlimited_quota then remain_quota else remain_quota - 40 end,
      last_used_at = greatest(coalesce(last_used_at, 0), 77) where id = ${id}`)).toEqual([]);
    expect(await eventsOf(() => sql`update api_keys set used_quota = used_quota + 0, last_used_at = 78 where id = ${id}`)).toEqual([]);
    // An operator's write (it always sets updated_at) in the same second as the last one (same value) still notifies.
    expect(await eventsOf(() => sql`update api_keys set remain_quota = 5000, updated_at = 1 where id = ${id}`)).toEqual([{ event: 'apikey.changed', payload: { keyId: id } }]);
    expect(await eventsOf(() => sql`update api_keys set status = 2 where id = ${id}`)).toEqual([{ event: 'apikey.changed', payload: { keyId: id } }]);
    // Unlimited key: remain_quota stays, used_quota moves: a charge.
    expect(await eventsOf(() => sql`update api_keys set unlimited_quota = true where id = ${id}`)).toEqual([{ event: 'apikey.changed', payload: { keyId: id } }]);
    expect(await eventsOf(() => sql`update api_keys set used_quota = used_quota + 40,
      remain_quota = case when unlimited_quota then remain_quota else remain_quota - 40 end where id = ${id}`)).toEqual([]);
    expect(await eventsOf(() => sql`delete from api_keys where id = ${id}`)).toEqual([{ event: 'apikey.changed', payload: { keyId: id } }]);
  });

  test('deleting a user announces the user and each of its keys (cascade)', async () => {
    const owner = await newUser('feed-u5');
    const keys = await sql<{ id: string }[]>`insert into api_keys (user_id, key_hash, prefix, created_at, updated_at)
      values (${owner}, ${'a-' + owner}, 'p', 1, 1), (${owner}, ${'b-' + owner}, 'p', 1, 1) returning id`;
    await eventsOf(async () => {});
    const got = await eventsOf(() => sql`delete from users where id = ${owner}`);
    expect(new Set(got.map((e) => JSON.stringify(e)))).toEqual(new Set([
      JSON.stringify({ event: 'user.changed', payload: { userId: owner } }),
      ...keys.map((k) => JSON.stringify({ event: 'apikey.changed', payload: { keyId: Number(k.id) } })),
    ]));
  });

  test('channels: insert, status change and delete notify; a probe result does not', async () => {
    let id = 0;
    expect(await eventsOf(async () => {
      const [c] = await sql<{ id: number }[]>`insert into channels (name, type, base_url, key, models, model_mapping, headers, created_at, updated_at)
        values ('c', 'openai', 'http://127.0.0.1:1', 'k', '["m"]', '{}', '{}', 1, 1) returning id`;
      id = Number(c!.id);
    })).toEqual([{ event: 'channel.changed', payload: { channelId: id } }]);
    expect(await eventsOf(() => sql`update channels set response_time_ms = 123, tested_at = 456 where id = ${id}`)).toEqual([]);
    expect(await eventsOf(() => sql`update channels set status = 3, status_reason = 'upstream 500' where id = ${id} and status = 1`))
      .toEqual([{ event: 'channel.changed', payload: { channelId: id } }]);
    expect(await eventsOf(() => sql`update channels set models = '["m", "n"]' where id = ${id}`))
      .toEqual([{ event: 'channel.changed', payload: { channelId: id } }]);
    // overrides is json (kept as written): compared as text, so a change of key order alone is a change too.
    expect(await eventsOf(() => sql`update channels set overrides = '[{"op":"clamp","path":"max_tokens","max":5}]' where id = ${id}`))
      .toEqual([{ event: 'channel.changed', payload: { channelId: id } }]);
    expect(await eventsOf(() => sql`update channels set overrides = '[{"op":"clamp","path":"max_tokens","max":5}]' where id = ${id}`)).toEqual([]);
    expect((await sql`select overrides::text as o from channels where id = ${id}`)[0]!.o).toBe('[{"op":"clamp","path":"max_tokens","max":5}]');
    expect(await eventsOf(() => sql`delete from channels where id = ${id}`)).toEqual([{ event: 'channel.changed', payload: { channelId: id } }]);
  });

  test('prices: insert, update, rename and delete notify with the model; an over-long name says "all"', async () => {
    const ev = (model: string | null): Seen => ({ event: 'price.changed', payload: { model } });
    expect(await eventsOf(() => sql`insert into prices (model, input, updated_at) values ('p-1', 5, 1)`)).toEqual([ev('p-1')]);
    expect(await eventsOf(() => sql`update prices set input = 6 where model = 'p-1'`)).toEqual([ev('p-1')]);
    expect(await eventsOf(() => sql`update prices set input = 6 where model = 'p-1'`)).toEqual([]);
    expect(await eventsOf(() => sql`update prices set model = 'p-2' where model = 'p-1'`)).toEqual([ev('p-2'), ev('p-1')]);
    expect(await eventsOf(() => sql`delete from prices where model = 'p-2'`)).toEqual([ev('p-2')]);
    const long = 'x'.repeat(8_000);
    expect(await eventsOf(() => sql`insert into prices (model, updated_at) values (${long}, 1)`)).toEqual([ev(null)]);
  });

  test('groups: insert, update and delete arrive as group.changed', async () => {
    let id = 0;
    expect(await eventsOf(async () => {
      const [g] = await sql<{ id: number }[]>`insert into groups (name, created_at, updated_at) values ('vip', 1, 1) returning id`;
      id = Number(g!.id);
    })).toEqual([{ event: 'group.changed', payload: { groupId: id } }]);
    expect(await eventsOf(() => sql`update groups set ratio = 1500 where id = ${id}`)).toEqual([{ event: 'group.changed', payload: { groupId: id } }]);
    expect(await eventsOf(() => sql`delete from groups where id = ${id}`)).toEqual([{ event: 'group.changed', payload: { groupId: id } }]);
  });

  test('a listener whose refresh fails (a query after shutdown) is logged, never an unhandled rejection', async () => {
    const bus2 = new ChangeBus();
    const { log, lines } = memoryLogger();
    let failed = 0;
    bus2.on('group.changed', async () => {
      failed++;
      throw new Error('write CONNECTION_ENDED (test)');
    });
    const unhandled: unknown[] = [];
    const onUnhandled = (e: unknown) => void unhandled.push(e);
    process.on('unhandledRejection', onUnhandled);
    const f2 = await PgChangeFeed.start({ url: PG_TEST_URL, schema, bus: bus2, log, onResync: () => {}, resyncMs: 60_000, applicationName: `${appName}-2` });
    try {
      await sql`insert into groups (name, created_at, updated_at) values ('failing-refresh', 1, 1)`;
      await within(1_000, () => failed > 0);
      await Bun.sleep(50);
      expect(unhandled).toEqual([]);
      expect(lines.some((l) => l.includes('change_feed.listener_failed'))).toBe(true);
    } finally {
      process.off('unhandledRejection', onUnhandled);
      await f2.close();
    }
  });

  test('a change whose refresh failed is applied by a resync soon after (the notification itself is gone)', async () => {
    const bus2 = new ChangeBus();
    const { log, lines } = memoryLogger();
    const resynced: number[] = [];
    let refreshes = 0;
    bus2.on('apikey.changed', async () => {
      if (++refreshes === 1) throw new Error('sorry, too many clients already (test)');
    });
    const f2 = await PgChangeFeed.start({ url: PG_TEST_URL, schema, bus: bus2, log, onResync: () => void resynced.push(performance.now()), resyncMs: 60_000, applicationName: `${appName}-3` });
    try {
      expect(resynced).toHaveLength(1);
      const [u] = await sql<{ id: number }[]>`insert into users (username, password_hash, created_at, updated_at) values ('refresh-fails', 'x', 1, 1) returning id`;
      const t0 = performance.now();
      await sql`insert into api_keys (user_id, name, key_hash, prefix, created_at, updated_at) values (${u!.id}, 'k', 'refresh-fails-hash', 'sk-rf', 1, 1)`;
      await within(1_000, () => resynced.length === 2);
      expect(resynced[1]! - t0).toBeLessThan(1_000);
      expect(lines.some((l) => l.includes('change_feed.listener_failed'))).toBe(true);
      // Nothing else failed: no further resync.
      await Bun.sleep(600);
      expect(resynced).toHaveLength(2);
    } finally {
      await f2.close();
    }
  });

  test('a cache re-reading a burst in batches that fail logs one line per failed batch (with its size), not one per notification', async () => {
    const bus2 = new ChangeBus();
    const { log, lines } = memoryLogger();
    const asked: number[] = [];
    // A cache that re-reads in batches (as the user directory does), every batch refused.
    const cache = new BatchedRefresh<number>(async (ids) => {
      asked.push(...(ids ?? []));
      await Bun.sleep(5);
      throw new Error('sorry, too many clients already (test)');
    });
    bus2.on('user.changed', ({ userId }) => cache.run(userId));
    const f2 = await PgChangeFeed.start({ url: PG_TEST_URL, schema, bus: bus2, log, onResync: () => {}, resyncMs: 60_000, applicationName: `${appName}-batchlog` });
    try {
      await sql`insert into users (username, password_hash, created_at, updated_at) select 'batch-log-' || g, 'x', 1, 1 from generate_series(1, 300) g`;
      await within(5_000, () => asked.length === 300);
      await Bun.sleep(50);
      const failed = lines.filter((l) => l.includes('change_feed.listener_failed'));
      expect(failed.length).toBeGreaterThan(0);
      // One per batch the burst was split into (a few), each saying how many it re-read; the 300 add up.
      expect(failed.length).toBeLessThan(30);
      expect(failed.reduce((n, l) => n + Number(/batch=(\d+)/.exec(l)?.[1] ?? NaN), 0)).toBe(300);
    } finally {
      await f2.close();
    }
  });

  test('a refresh that keeps failing while the reloads succeed backs off: no full reload 4 times a second for as long as changes come', async () => {
    const bus2 = new ChangeBus();
    const { log } = memoryLogger();
    const resynced: number[] = [];
    // The database sheds load: every row re-read fails, the whole reload still gets through.
    bus2.on('user.changed', async () => { throw new Error('canceling statement due to statement timeout (test)'); });
    // A reload takes a while (every cache re-reads its table): notifications keep coming meanwhile.
    const onResync = async () => { resynced.push(performance.now()); await Bun.sleep(100); };
    const f2 = await PgChangeFeed.start({ url: PG_TEST_URL, schema, bus: bus2, log, onResync, resyncMs: 60_000, applicationName: `${appName}-storm` });
    try {
      expect(resynced).toHaveLength(1);
      const t0 = performance.now();
      // A change every 50 ms for 3 s (a busy cluster: users edited, balances moved), some of them during each reload.
      for (let i = 0; performance.now() - t0 < 3_000; i++) {
        await insertUser(`storm-${i}`);
        await Bun.sleep(50);
      }
      const during = resynced.filter((t) => t >= t0).length;
      // Waits of 0.25, 0.5, 1 and 2 s: 3 reloads in 3 s (each one a full reload of every cache on every node), not one
      // per 0.25 s, nor one after another with no wait (a refresh failing during a reload).
      expect(during).toBeGreaterThanOrEqual(2);
      expect(during).toBeLessThanOrEqual(4);
    } finally {
      await f2.close();
    }
  }, 10_000);

  test('a cache whose refresh fails does not keep the later listeners (the in-flight guard) from the change; it still resyncs', async () => {
    const bus2 = new ChangeBus();
    const { log, lines } = memoryLogger();
    const resynced: number[] = [];
    const guard: number[] = [];
    let refreshes = 0;
    // Registered first, like the user directory before the in-flight guard.
    bus2.on('user.changed', async () => {
      refreshes++;
      await Bun.sleep(5);
      throw new Error('sorry, too many clients already (test)');
    });
    bus2.on('user.changed', ({ userId }) => void guard.push(userId));
    const f2 = await PgChangeFeed.start({ url: PG_TEST_URL, schema, bus: bus2, log, onResync: () => void resynced.push(performance.now()), resyncMs: 60_000, applicationName: `${appName}-4` });
    try {
      const [u] = await sql<{ id: number }[]>`insert into users (username, password_hash, created_at, updated_at) values ('guard-hears', 'x', 1, 1) returning id`;
      await within(1_000, () => refreshes > 0 && resynced.length === 2);
      await within(1_000, () => guard.includes(Number(u!.id)));
      expect(lines.some((l) => l.includes('change_feed.listener_failed'))).toBe(true);
    } finally {
      await f2.close();
    }
  });

  test('every column of users, api_keys and channels is either watched by its update trigger (list and WHEN) or a declared counter', async () => {
    // A new column must be classified in the migration: announced, or a counter that charges/probes move.
    const counters: Record<string, string[]> = {
      users: ['quota', 'balance_version', 'used_quota', 'request_count', 'updated_at', 'failed_logins', 'lock_count', 'locked_until', 'totp_last_step'],
      api_keys: ['used_quota', 'remain_quota', 'remain_version', 'last_used_at'],
      channels: ['response_time_ms', 'tested_at'],
    };
    for (const [table, counted] of Object.entries(counters)) {
      const cols = (await sql<{ c: string }[]>`select column_name as c from information_schema.columns where table_schema = ${schema} and table_name = ${table}`).map((r) => r.c);
      const [trig] = await sql<{ watched: string[]; def: string }[]>`
        select array(select a.attname::text from pg_attribute a where a.attrelid = t.tgrelid and a.attnum = any(t.tgattr::int2[])) as watched,
               pg_get_triggerdef(t.oid) as def
          from pg_trigger t where t.tgname = ${`gw_change_${table}_update`} and t.tgrelid = ${`${schema}.${table}`}::regclass`;
      expect(trig).toBeDefined();
      const watched = trig!.watched;
      expect(watched.filter((c) => counted.includes(c))).toEqual([]);
      expect([...watched, ...counted].sort()).toEqual([...cols].sort());
      const quoted = (c: string) => (c === 'group' ? '"group"' : c);
      // A json column (no equality operator) is compared as text.
      const compared = (c: string) => [`old.${quoted(c)} IS DISTINCT FROM new.${quoted(c)}`, `(old.${quoted(c)})::text IS DISTINCT FROM (new.${quoted(c)})::text`];
      for (const c of watched) expect(compared(c).some((form) => trig!.def.includes(form))).toBe(true);
    }
  });

  test('a rolled-back transaction notifies nothing', async () => {
    const got = await eventsOf(() => sql.begin(async (tx) => {
      await tx`insert into users (username, password_hash, created_at, updated_at) values ('feed-rollback', 'x', 1, 1)`;
      await tx`insert into prices (model, updated_at) values ('rolled-back', 1)`;
      throw new Error('abort');
    }).catch(() => {}));
    expect(got).toEqual([]);
  });

  test('changes in another schema of the same database are not emitted here (and vice versa)', async () => {
    const foreign = feed.stats.foreign;
    const otherSeen: unknown[] = [];
    const otherBus = new ChangeBus();
    otherBus.on('price.changed', (p) => void otherSeen.push(p));
    const otherFeed = await PgChangeFeed.start({ url: PG_TEST_URL, schema: otherSchema, bus: otherBus, onResync: () => {}, resyncMs: 0 });
    try {
      const got = await eventsOf(async () => {
        await other.sql`insert into users (username, password_hash, created_at, updated_at) values ('elsewhere', 'x', 1, 1)`;
        await other.sql`insert into prices (model, updated_at) values ('other-model', 1)`;
      });
      expect(got).toEqual([]);
      expect(feed.stats.foreign).toBeGreaterThanOrEqual(foreign + 2);
      await within(1_000, () => otherSeen.length === 1);
      expect(otherSeen).toEqual([{ model: 'other-model' }]);
    } finally {
      await otherFeed.close();
    }
    // This schema's own markers never reached the other feed.
    expect(otherSeen).toEqual([{ model: 'other-model' }]);
  });

  test('after pg_terminate_backend of the listening session, it listens again, resyncs, and changes arrive', async () => {
    const admin = postgres(PG_TEST_URL, { max: 1, onnotice: () => {} });
    try {
      const sessions = await admin<{ pid: number }[]>`select pid from pg_stat_activity where application_name = ${appName}`;
      expect(sessions.length).toBe(1);
      const listensBefore = feed.stats.listens;
      const t0 = performance.now();
      await admin`select pg_terminate_backend(${sessions[0]!.pid})`;
      await within(2_000, () => feed.stats.listens === listensBefore + 1);
      await feed.settled();
      const relisten = performance.now() - t0;
      expect(resyncs).toEqual(['listen', 'listen']);
      const [again] = await admin<{ pid: number }[]>`select pid from pg_stat_activity where application_name = ${appName}`;
      expect(again!.pid).not.toBe(sessions[0]!.pid);
      let id = 0;
      expect(await eventsOf(async () => (id = await insertUser('after-terminate')))).toEqual([{ event: 'user.changed', payload: { userId: id } }]);
      console.log(`change feed: re-listened ${relisten.toFixed(0)} ms after pg_terminate_backend`);
    } finally {
      await admin.end({ timeout: 1 });
    }
  });

  test('a resync that fails (the database refused the reload) is tried again within a second, not at the next period', async () => {
    const bus = new ChangeBus();
    const calls: Array<{ reason: ResyncReason; at: number }> = [];
    const { log, lines } = memoryLogger({ format: 'text' });
    const t0 = performance.now();
    // The first two reloads fail: the one after LISTEN, and its first retry.
    const f = await PgChangeFeed.start({
      url: PG_TEST_URL, schema, bus, log, resyncMs: 60_000, applicationName: `${appName}-retry`,
      onResync: (reason) => {
        calls.push({ reason, at: performance.now() - t0 });
        if (calls.length <= 2) throw new Error('sorry, too many clients already');
      },
    });
    try {
      await within(2_000, () => calls.length === 3);
      await f.settled();
      expect(calls.map((c) => c.reason)).toEqual(['listen', 'listen', 'listen']);
      expect(lines.filter((l) => l.includes('change_feed.resync_failed'))).toHaveLength(2);
      // Succeeded: no more tries until the period.
      await Bun.sleep(1_200);
      expect(calls).toHaveLength(3);
    } finally {
      await f.close();
    }
  });

  test('commit-to-event latency over 50 single-row transactions', async () => {
    const arrived = new Map<string, number>();
    const bus = new ChangeBus();
    bus.on('price.changed', ({ model }) => void arrived.set(model!, performance.now()));
    const f = await PgChangeFeed.start({ url: PG_TEST_URL, schema, bus, onResync: () => {}, resyncMs: 0 });
    try {
      const lat: number[] = [];
      const commit: number[] = [];
      for (let i = 0; i < 50; i++) {
        const model = `lat-${i}`;
        const t0 = performance.now();
        await sql`insert into prices (model, updated_at) values (${model}, 1)`;
        commit.push(performance.now() - t0);
        await within(1_000, () => arrived.has(model));
        lat.push(arrived.get(model)! - t0);
        if (i === 0) expect(arrived.get(model)!).toBeGreaterThan(t0);
      }
      lat.sort((a, b) => a - b);
      commit.sort((a, b) => a - b);
      console.log(`change feed: insert sent to event emitted p50 ${lat[25]!.toFixed(2)} ms, max ${lat[49]!.toFixed(2)} ms (insert committed p50 ${commit[25]!.toFixed(2)} ms)`);
      expect(lat[49]!).toBeLessThan(1_000);
    } finally {
      await f.close();
    }
  });
});

describe.skipIf(!available)('PgChangeFeed when the database is away for a while', () => {
  test('re-listening fails while it is down; once back, the heartbeat restores the feed, which resyncs', async () => {
    const target = new URL(PG_TEST_URL);
    const proxy = tcpProxy({ host: target.hostname, port: Number(target.port || 5432) });
    const via = new URL(PG_TEST_URL);
    via.host = `127.0.0.1:${proxy.port}`;
    const bus = new ChangeBus();
    const got: Array<string | null> = [];
    bus.on('price.changed', ({ model }) => void got.push(model));
    const reasons: Array<{ reason: ResyncReason; at: number }> = [];
    const f = await PgChangeFeed.start({ url: via.toString(), schema, bus, resyncMs: 250, onResync: (reason) => void reasons.push({ reason, at: performance.now() }) });
    try {
      proxy.down();
      // Written while nobody listens through the proxy: lost to NOTIFY, recovered by the resync.
      await sql`insert into prices (model, updated_at) values ('during-outage', 1)`;
      await Bun.sleep(800);
      proxy.up();
      const upAt = performance.now();
      let i = 0;
      const ms = await (async () => {
        const t0 = performance.now();
        while (!got.some((m) => m?.startsWith('after-outage-'))) {
          if (performance.now() - t0 > 5_000) throw new Error('no change arrived within 5 s of the database coming back');
          await sql`insert into prices (model, updated_at) values (${`after-outage-${i++}`}, 1)`;
          await Bun.sleep(50);
        }
        return performance.now() - t0;
      })();
      expect(got).not.toContain('during-outage');
      expect(reasons.some((r) => r.reason === 'listen' && r.at >= upAt)).toBe(true);
      console.log(`change feed: back ${ms.toFixed(0)} ms after the database returned (heartbeat 250 ms; restarts ${f.stats.restarts}, listens ${f.stats.listens})`);
    } finally {
      await f.close();
      proxy.stop();
    }
  });

  test('a listening connection that silently stops carrying bytes is replaced within two heartbeats', async () => {
    const target = new URL(PG_TEST_URL);
    const proxy = tcpProxy({ host: target.hostname, port: Number(target.port || 5432) });
    const via = new URL(PG_TEST_URL);
    via.host = `127.0.0.1:${proxy.port}`;
    const bus = new ChangeBus();
    const got: Array<string | null> = [];
    bus.on('price.changed', ({ model }) => void got.push(model));
    const reasons: ResyncReason[] = [];
    const f = await PgChangeFeed.start({ url: via.toString(), schema, bus, resyncMs: 250, onResync: (r) => void reasons.push(r) });
    try {
      // No FIN, no RST: TCP keepalive would take minutes to notice; postgres.js never re-listens.
      proxy.blackhole();
      const t0 = performance.now();
      let i = 0;
      while (!got.some((m) => m?.startsWith('after-blackhole-'))) {
        if (performance.now() - t0 > 3_000) throw new Error('no change arrived within 3 s of the connection going silent');
        await sql`insert into prices (model, updated_at) values (${`after-blackhole-${i++}`}, 1)`;
        await Bun.sleep(50);
      }
      const ms = performance.now() - t0;
      expect(f.stats.restarts).toBeGreaterThanOrEqual(1);
      expect(reasons.filter((r) => r === 'listen').length).toBeGreaterThanOrEqual(2);
      console.log(`change feed: silent connection replaced, changes back after ${ms.toFixed(0)} ms (heartbeat 250 ms)`);
    } finally {
      await f.close();
      proxy.stop();
    }
  });
});
