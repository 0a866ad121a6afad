/**
 * PgGroupCommitter against the real local PostgreSQL: exact money under concurrency, idempotency by
 * request id, and settling exactly once through a killed backend, a lost COMMIT reply and an outage.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'bun:test';
import { PgGroupCommitter, SettlementUnavailableError, isTransientPgError } from './group-commit';
import { openPostgres, type PgHandle } from './client';
import { PgApiKeysRepo, PgBudgetsRepo, PgSettlementsRepo, PgUsersRepo } from '../repos-pg';
import { pgBudgetCharges } from './budget-charges';
import type { SettleOutcome, SettlementRow } from '../repos/settlements';
import { PG_TEST_URL, openPgTestDb, pgThroughProxy, requirePg, type PgTestDb } from '../../../../tests/helpers/postgres';

const available = await requirePg('libs/db/src/pg/group-commit.test.ts');
let t: PgTestDb;
let h: PgHandle;

beforeAll(async () => {
  if (!available) return;
  t = await openPgTestDb('gw_gcommit', { max: 4 });
  h = t.handle;
});
afterAll(async () => {
  // Up to 5 s: postgres.js's end() waits out a connection whose backend was killed with a query on it.
  if (available) await t?.close();
}, 20_000);
beforeEach(async () => {
  if (available) await t.reset();
});

let seq = 0;
async function seedUsers(n: number, quota: number): Promise<Array<{ userId: number; keyId: number }>> {
  const out = [];
  for (let i = 0; i < n; i++) {
    const u = await new PgUsersRepo(h.db).insert({ username: `gc${++seq}`, passwordHash: 'h', quota, createdAt: 1, updatedAt: 1 });
    const k = await new PgApiKeysRepo(h.db).insert({ userId: u.id, keyHash: `gck${seq}`, prefix: 'p', createdAt: 1, updatedAt: 1 });
    out.push({ userId: u.id, keyId: k.id });
  }
  return out;
}
const row = (userId: number, apiKeyId: number, over: Partial<SettlementRow> = {}): SettlementRow => ({
  requestId: `gc-req-${++seq}`, kind: 'messages', userId, apiKeyId, channelId: null, model: 'm', upstreamModel: 'm', stream: false,
  inputTokens: 1, outputTokens: 1, cacheReadTokens: 0, cacheWriteTokens: 0, audioInputTokens: 0, audioOutputTokens: 0, cost: 10,
  latencyMs: 1, ttftMs: null, status: 200, errorCode: '', attempts: 1, ip: '', createdAt: 100, ...over,
});

/** users.quota, the ledger's charges and the usage rows of every user agree, and each request id is written once. */
async function books(userIds: number[]) {
  const q = await h.sql<{ id: number; quota: string; charged: string | null; charges: string; usage: string; usage_cost: string | null }[]>`
    select u.id, u.quota,
      (select sum(amount) from ledger l where l.user_id = u.id and l.kind = 'charge') as charged,
      (select count(*) from ledger l where l.user_id = u.id and l.kind = 'charge') as charges,
      (select count(*) from usage_logs g where g.user_id = u.id) as usage,
      (select sum(cost) from usage_logs g where g.user_id = u.id) as usage_cost
    from users u where u.id in ${h.sql(userIds)} order by u.id`;
  const dup = await h.sql<{ n: string }[]>`select count(*) as n from (select request_id from usage_logs group by request_id having count(*) > 1) d`;
  expect(Number(dup[0]!.n)).toBe(0);
  return new Map(q.map((r) => [Number(r.id), {
    quota: Number(r.quota), charged: -Number(r.charged ?? 0), charges: Number(r.charges), usage: Number(r.usage), usageCost: Number(r.usage_cost ?? 0),
  }]));
}

describe.skipIf(!available)('PgGroupCommitter', () => {
  test('200 concurrent settles for 20 users: balance = opening - costs = -ledger charges, one usage row each, in few batches', async () => {
    const users = await seedUsers(20, 1_000_000);
    const batches: number[] = [];
    const gc = new PgGroupCommitter(h.db, { onBatch: (b) => batches.push(b.rows) });
    const rows = Array.from({ length: 200 }, (_, i) => row(users[i % 20]!.userId, users[i % 20]!.keyId, { cost: 1 + ((i * 37) % 101) }));
    const out = await Promise.all(rows.map((r) => gc.settle(r)));
    expect(out.every((o) => o.inserted)).toBe(true);
    const b = await books(users.map((u) => u.userId));
    for (const u of users) {
      const spent = rows.filter((r) => r.userId === u.userId).reduce((s, r) => s + r.cost, 0);
      const got = b.get(u.userId)!;
      expect(got.quota).toBe(1_000_000 - spent);
      expect(got.charged).toBe(spent);
      expect(got.usage).toBe(10);
      expect(got.charges).toBe(10);
      // The balance handed back for a user's last settlement in commit order is the committed one.
      const last = out.filter((_, i) => rows[i]!.userId === u.userId).map((o) => (o.inserted ? o.balance! : Infinity));
      expect(Math.min(...last)).toBe(got.quota);
    }
    for (const u of users) {
      // Each ledger row's balance_after is the previous one minus its charge.
      const chain = await h.sql<{ amount: string; balance_after: string }[]>`select amount, balance_after from ledger where user_id = ${u.userId} order by id`;
      let bal = 1_000_000;
      for (const c of chain) expect(Number(c.balance_after)).toBe((bal += Number(c.amount)));
    }
    expect(batches.reduce((s, n) => s + n, 0)).toBe(200);
    expect(batches.length).toBeLessThan(20);
    const keys = await h.sql<{ used: string }[]>`select sum(used_quota) as used from api_keys`;
    expect(Number(keys[0]!.used)).toBe(rows.reduce((s, r) => s + r.cost, 0));
    await gc.close();
  });

  test('a batch (applyMany) writes exactly what the same rows written one by one (apply) write', async () => {
    const a = await seedUsers(3, 1_000);
    const b = await seedUsers(3, 1_000);
    await h.sql`update api_keys set unlimited_quota = false, remain_quota = 500`;
    const mix = (set: typeof a, tag: string): SettlementRow[] => [
      row(set[0]!.userId, set[0]!.keyId, { requestId: `${tag}-1`, cost: 30, createdAt: 200 }),
      row(set[1]!.userId, set[1]!.keyId, { requestId: `${tag}-2`, cost: 0, status: 502, createdAt: 300 }),
      row(set[0]!.userId, set[0]!.keyId, { requestId: `${tag}-3`, cost: 12, createdAt: 150 }),
      row(set[2]!.userId, set[2]!.keyId, { requestId: `${tag}-4`, cost: 0, status: 200, createdAt: 400 }),
      row(set[0]!.userId, set[0]!.keyId, { requestId: `${tag}-1`, cost: 99, createdAt: 500 }), // repeated id: ignored
    ];
    const repo = new PgSettlementsRepo(h.db);
    const many = await h.db.transaction((tx) => repo.applyMany(mix(a, 'A'), tx));
    const ones = [];
    for (const r of mix(b, 'B')) ones.push(await h.db.transaction((tx) => repo.apply(r, tx)));
    // Mirrors differ by design: a batch reads back each balance as the whole batch leaves it.
    const plain = (o: SettleOutcome[]) => o.map((x) => { const { mirror: _, ...rest } = x as SettleOutcome & { mirror?: unknown }; return rest; });
    expect(plain(many)).toEqual(plain(ones));
    expect(many.map((o) => (o.inserted ? o.mirror?.user?.balance : null))).toEqual([958, undefined, 958, 1000, null]); // a failed free request does not touch the user
    const state = async (set: typeof a) => ({
      users: await h.sql`select quota, used_quota, request_count, updated_at from users where id in ${h.sql(set.map((x) => x.userId))} order by id`,
      keys: await h.sql`select used_quota, remain_quota, last_used_at from api_keys where id in ${h.sql(set.map((x) => x.keyId))} order by id`,
      ledger: await h.sql`select amount, balance_after, note, created_at from ledger where user_id in ${h.sql(set.map((x) => x.userId))} order by id`,
      usage: await h.sql`select cost, status, created_at from usage_logs where user_id in ${h.sql(set.map((x) => x.userId))} order by id`,
    });
    expect(await state(a)).toEqual(await state(b));
  });

  test('accounts(): users and their limited keys with versions, one snapshot; unknown users left out', async () => {
    const [a, b] = await seedUsers(2, 1_000);
    const c = new PgGroupCommitter(h.db);
    await h.sql`update api_keys set unlimited_quota = false, remain_quota = 300 where id = ${a!.keyId}`;
    await c.settle(row(a!.userId, a!.keyId, { cost: 25 }));
    const out = await c.accounts([a!.userId, b!.userId, 999_999]);
    const byUser = new Map(out.map((x) => [x.userId, x]));
    expect(out.length).toBe(2);
    expect(byUser.get(a!.userId)!.user).toEqual({ balance: 975, version: 1 });
    // The key was made limited (a version) and then charged (another).
    expect(byUser.get(a!.userId)!.keys).toEqual([{ keyId: a!.keyId, mirror: { balance: 275, version: 2 } }]);
    // b's key is unlimited: no mirror.
    expect(byUser.get(b!.userId)!).toEqual({ userId: b!.userId, user: { balance: 1_000, version: 0 }, keys: [] });
    expect(await c.accounts([])).toEqual([]);
    await c.close();
  });

  test("the batch's budget charge stops spent at 2^53 − 1, like used_quota", async () => {
    const [owner] = await seedUsers(1, 0);
    const b = await new PgBudgetsRepo(h.db).insert({ scope: 'user', subjectId: owner!.userId, period: 'daily', limitAmount: 1_000, createdAt: 1, updatedAt: 1 });
    const charges = pgBudgetCharges(h.db);
    const top = Number.MAX_SAFE_INTEGER;
    expect((await charges.charge(b.id, '2026-01-31', top - 5))!.spent).toBe(top - 5);
    expect((await charges.charge(b.id, '2026-01-31', 10))!.spent).toBe(top);
    expect((await charges.charge(b.id, '2026-01-31', top))!.spent).toBe(top);
    expect((await h.sql<{ s: string }[]>`select spent::text as s from budgets where id = ${b.id}`)[0]!.s).toBe(String(top));
  });

  test('a duplicate request id settles once, in one batch or across batches', async () => {
    const [u] = await seedUsers(1, 1_000);
    const gc = new PgGroupCommitter(h.db);
    const r = row(u!.userId, u!.keyId, { cost: 7 });
    const same = await Promise.all([gc.settle(r), gc.settle({ ...r })]);
    expect(same.filter((o) => o.inserted).length).toBe(1);
    expect(await gc.settle({ ...r })).toEqual({ inserted: false });
    const b = (await books([u!.userId])).get(u!.userId)!;
    expect(b).toMatchObject({ quota: 993, charged: 7, usage: 1, charges: 1 });
    await gc.close();
  });

  test('an idle committer writes at the end of the turn: nothing is sent while its caller runs, and the turn\'s rows share a batch', async () => {
    const [u] = await seedUsers(1, 1_000);
    const batches: Array<{ rows: number }> = [];
    const gc = new PgGroupCommitter(h.db, { onBatch: (b) => batches.push(b) });
    const a = gc.settle(row(u!.userId, u!.keyId, { cost: 3 }));
    // Still queued: the caller (an answer being returned) goes on before the batch is built and sent.
    expect(gc.queued).toBe(1);
    const b = gc.settle(row(u!.userId, u!.keyId, { cost: 4 }));
    expect(gc.queued).toBe(2);
    expect((await Promise.all([a, b])).map((o) => o.inserted)).toEqual([true, true]);
    expect(batches.map((x) => x.rows)).toEqual([2]);
    expect((await books([u!.userId])).get(u!.userId)).toMatchObject({ quota: 993, usage: 2, charges: 2 });
    await gc.close();
  });

  test('one bad row in a batch fails alone; the others are written', async () => {
    const users = await seedUsers(3, 1_000);
    const batches: Array<{ oneByOne: boolean }> = [];
    // A 5 ms gathering window, so the four rows share one batch whatever turns they arrive in.
    const gc = new PgGroupCommitter(h.db, { onBatch: (b) => batches.push(b), maxDelayMs: 5 });
    const good = users.map((u) => row(u.userId, u.keyId, { cost: 5 }));
    const bad = row(999_999, users[0]!.keyId, { cost: 5 }); // no such user
    const results = await Promise.allSettled([good[0]!, bad, good[1]!, good[2]!].map((r) => gc.settle(r)));
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
    expect(isTransientPgError((results[1] as PromiseRejectedResult).reason)).toBe(false);
    expect(batches).toEqual([expect.objectContaining({ oneByOne: true })]);
    const b = await books(users.map((u) => u.userId));
    for (const u of users) expect(b.get(u.userId)).toMatchObject({ quota: 995, usage: 1, charges: 1 });
    const stray = await h.sql`select 1 from usage_logs where request_id = ${bad.requestId}`;
    expect(stray.length).toBe(0);
    await gc.close();
  });

  test('a batch sent in one piece that fails leaves its connection clean: the next batch on the same connection commits', async () => {
    const users = await seedUsers(2, 1_000);
    // One connection: the failed transaction's COMMIT (answered as ROLLBACK) must have ended it before reuse.
    const one = await openPostgres(PG_TEST_URL, { schema: h.schema, max: 1 });
    try {
      const batches: Array<{ rows: number; oneByOne: boolean }> = [];
      const gc = new PgGroupCommitter(one.db, { onBatch: (b) => batches.push(b), maxDelayMs: 5 });
      const first = await Promise.allSettled([row(users[0]!.userId, users[0]!.keyId), row(999_998, users[0]!.keyId)].map((r) => gc.settle(r)));
      expect(first.map((r) => r.status)).toEqual(['fulfilled', 'rejected']);
      expect(String((first[1] as PromiseRejectedResult).reason)).toContain('ledger: no user');
      const second = await Promise.all([row(users[0]!.userId, users[0]!.keyId), row(users[1]!.userId, users[1]!.keyId)].map((r) => gc.settle(r)));
      expect(second.every((o) => o.inserted)).toBe(true);
      expect(batches.map((b) => [b.rows, b.oneByOne])).toEqual([[2, true], [2, false]]);
      const b = await books(users.map((u) => u.userId));
      expect(b.get(users[0]!.userId)).toMatchObject({ quota: 980, usage: 2, charges: 2 });
      expect(b.get(users[1]!.userId)).toMatchObject({ quota: 990, usage: 1, charges: 1 });
      await gc.close();
    } finally {
      await one.close();
    }
  });

  test('the backend killed mid-batch (pg_terminate_backend): the batch is retried and everything settles exactly once', async () => {
    const users = await seedUsers(10, 100_000);
    const batches: Array<{ tries: number }> = [];
    const gc = new PgGroupCommitter(h.db, { onBatch: (b) => batches.push(b), backoffMs: 20, maxDelayMs: 5 });
    const rows = Array.from({ length: 50 }, (_, i) => row(users[i % 10]!.userId, users[i % 10]!.keyId, { cost: 3 + i }));
    let results!: Promise<unknown[]>;
    // A row lock on the last user holds the batch inside its transaction, its first rows already written.
    await h.sql.begin(async (s) => {
      const [me] = await s<{ pid: number }[]>`select pg_backend_pid() as pid`;
      await s`select 1 from users where id = ${users[9]!.userId} for update`;
      results = Promise.all(rows.map((r) => gc.settle(r)));
      results.catch(() => {});
      let victim: number | undefined;
      for (let i = 0; i < 200 && victim === undefined; i++) {
        await Bun.sleep(10);
        const w = await h.sql<{ pid: number }[]>`select pid from pg_stat_activity where ${me!.pid} = any(pg_blocking_pids(pid))`;
        victim = w[0]?.pid;
      }
      expect(victim).toBeDefined();
      const [k] = await h.sql<{ ok: boolean }[]>`select pg_terminate_backend(${victim!}) as ok`;
      expect(k!.ok).toBe(true);
    });
    const out = (await results) as Array<{ inserted: boolean }>;
    expect(out.every((o) => o.inserted)).toBe(true);
    expect(batches[0]!.tries).toBeGreaterThan(1);
    const b = await books(users.map((u) => u.userId));
    for (const u of users) {
      const spent = rows.filter((r) => r.userId === u.userId).reduce((s, r) => s + r.cost, 0);
      expect(b.get(u.userId)).toMatchObject({ quota: 100_000 - spent, charged: spent, usage: 5, charges: 5 });
    }
    await gc.close();
  });

  describe('through a TCP proxy', () => {
    const through = available ? pgThroughProxy() : null;
    const proxy = through?.proxy ?? null;
    let ph: PgHandle;
    beforeAll(async () => {
      if (!available) return;
      ph = await openPostgres(through!.url, { schema: h.schema, max: 2 });
    });
    afterAll(async () => {
      // The try abandoned at its deadline may still wait for a connection: nothing to wait for.
      await ph?.sql.end({ timeout: 0 }).catch(() => {});
      proxy?.stop();
    });

    test('COMMIT happens but its reply is lost: the retry inserts nothing and recognises the rows as written', async () => {
      const [u, v] = await seedUsers(2, 1_000);
      // Two rows in one batch: a transaction with a COMMIT of its own.
      const gc = new PgGroupCommitter(ph.db, { backoffMs: 10, maxDelayMs: 5 });
      proxy!.dropReplyAfter('commit');
      const out = await Promise.all([gc.settle(row(u!.userId, u!.keyId, { cost: 40 })), gc.settle(row(v!.userId, v!.keyId, { cost: 30 }))]);
      expect(out).toEqual([
        { inserted: true, balance: 960, recovered: true, mirror: { user: { balance: 960, version: 1 } } },
        { inserted: true, balance: 970, recovered: true, mirror: { user: { balance: 970, version: 1 } } },
      ]);
      expect((await books([u!.userId])).get(u!.userId)).toMatchObject({ quota: 960, charged: 40, usage: 1, charges: 1 });
      expect((await books([v!.userId])).get(v!.userId)).toMatchObject({ quota: 970, charged: 30, usage: 1, charges: 1 });
      await gc.close();
    });

    test('a lone settlement (one autocommitted statement) whose reply is lost: the retry recognises it, charged once', async () => {
      const [u] = await seedUsers(1, 1_000);
      const gc = new PgGroupCommitter(ph.db, { backoffMs: 10 });
      const r = row(u!.userId, u!.keyId, { cost: 40 });
      // The statement goes out as a prepared one: its text may be cached, but the request id is always a parameter.
      proxy!.dropReplyAfter(r.requestId);
      expect(await gc.settle(r)).toEqual({ inserted: true, balance: 960, recovered: true, mirror: { user: { balance: 960, version: 1 } } });
      expect((await books([u!.userId])).get(u!.userId)).toMatchObject({ quota: 960, charged: 40, usage: 1, charges: 1 });
      await gc.close();
    });

    test('database unreachable: retried with backoff; written once it is back, refused past the deadline', async () => {
      const [u] = await seedUsers(1, 1_000);
      proxy!.down();
      try {
        const quick = new PgGroupCommitter(ph.db, { retryDeadlineMs: 150, backoffMs: 20 });
        const lost = row(u!.userId, u!.keyId, { cost: 1 });
        const t0 = performance.now();
        const err = await quick.settle(lost).catch((e) => e);
        expect(err).toBeInstanceOf(SettlementUnavailableError);
        expect(performance.now() - t0).toBeLessThan(1_000);
        const patient = new PgGroupCommitter(ph.db, { retryDeadlineMs: 10_000, backoffMs: 20, maxBackoffMs: 100 });
        const p = patient.settle(row(u!.userId, u!.keyId, { cost: 100 }));
        await Bun.sleep(300);
        proxy!.up();
        expect(await p).toMatchObject({ inserted: true, balance: 900 });
        // The request the first committer gave up on is retried under its id: written once.
        expect(await patient.settle(lost)).toMatchObject({ inserted: true, balance: 899 });
        expect(await patient.settle(lost)).toEqual({ inserted: false });
      } finally {
        proxy!.up();
      }
      expect((await books([u!.userId])).get(u!.userId)).toMatchObject({ quota: 899, usage: 2, charges: 2 });
    }, 30_000);

    test('a connection that silently stops carrying bytes mid-settlement: closed after the silence limit, the retry commits once', async () => {
      const { proxy: quiet, url: quietUrl } = pgThroughProxy();
      const pool = await openPostgres(quietUrl, { schema: h.schema, max: 2, silenceMs: 1_000 });
      try {
        const [u] = await seedUsers(1, 1_000);
        const gc = new PgGroupCommitter(pool.db, { retryDeadlineMs: 10_000, backoffMs: 20 });
        await gc.settle(row(u!.userId, u!.keyId, { cost: 1 }));
        const t0 = performance.now();
        const p = gc.settle(row(u!.userId, u!.keyId, { cost: 40 }));
        // Its statement goes out on the next tick, into a connection that no longer carries anything.
        quiet.blackhole();
        expect(await p).toMatchObject({ inserted: true, balance: 959 });
        const took = performance.now() - t0;
        console.log(`settled ${took.toFixed(0)} ms after its connection went silent`);
        expect(took).toBeLessThan(4_000);
        expect((await books([u!.userId])).get(u!.userId)).toMatchObject({ quota: 959, usage: 2, charges: 2 });
        await gc.close();
      } finally {
        await pool.sql.end({ timeout: 0 }).catch(() => {});
        quiet.stop();
      }
    }, 30_000);
  });
});
