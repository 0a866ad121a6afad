/**
 * `bun run db:copy` as an operator runs it: a real SQLite file with rows in every table, the command
 * as a subprocess, then every row compared in PostgreSQL and fresh ids checked.
 */
import { afterAll, describe, expect, test } from 'bun:test';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { asc, getTableColumns, sql } from 'drizzle-orm';
import { openDatabase, schema as sq, type Db } from '@gw/db';
import { copyOrder, openPostgres, pgSchema } from '@gw/db/pg';
import { SecretBox } from '@gw/core';
import { PG_TEST_URL, dropSchema, freshSchema, requirePg } from '../helpers/postgres';

const ROOT = join(import.meta.dir, '..', '..');
const available = await requirePg('tests/e2e/db-copy.test.ts');
const dir = mkdtempSync(join(tmpdir(), 'gw-copy-'));
const schemas: string[] = [];

afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  if (available) for (const s of schemas) await dropSchema(s);
});

/** The key the seeded secrets are sealed with; every copy runs with it as SECRET_KEY unless a test says otherwise. */
const KEY = '5e'.repeat(32);
const box = new SecretBox(Buffer.from(KEY, 'hex'));

async function runCopy(args: string[], env: Record<string, string | undefined> = { SECRET_KEY: KEY }) {
  const proc = Bun.spawn([process.execPath, 'run', '--silent', 'db:copy', ...args], {
    cwd: ROOT, stdout: 'pipe', stderr: 'pipe', stdin: 'ignore', env: { ...process.env, SECRET_KEY: undefined, ...env },
  });
  const timer = setTimeout(() => proc.kill(9), 30_000);
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  clearTimeout(timer);
  return { code, stdout, stderr };
}

/** One or more rows in every table, with the values a copy is most likely to damage. */
function seed(db: Db) {
  const now = 1_763_900_000_123;
  db.insert(sq.users).values([
    { id: 1, username: 'root', passwordHash: 'h', role: 100, quota: 999_999_999_999_999, usedQuota: 5, requestCount: 7, totpEnabled: true, totpSecret: box.seal('JBSWY3DPEHPK3PXP'), totpLastStep: 58_796_666, createdAt: now, updatedAt: now },
    { id: 7, username: 'alice', passwordHash: 'h2', email: 'a@example.test', group: 'vip', createdAt: now, updatedAt: now },
  ]).run();
  db.insert(sq.sessions).values({ idHash: 'sess-hash', userId: 7, createdAt: now, expiresAt: now + 1, ip: '127.0.0.1', userAgent: 'ua' }).run();
  db.insert(sq.accessTokens).values({ id: 3, userId: 1, name: 'ci', tokenHash: 'th', prefix: 'gwm_ab', createdAt: now, expiresAt: null }).run();
  db.insert(sq.apiKeys).values([
    { id: 11, userId: 7, keyHash: 'k1', prefix: 'sk-1', models: null, allowIps: null, createdAt: now, updatedAt: now },
    { id: 12, userId: 7, keyHash: 'k2', prefix: 'sk-2', unlimitedQuota: false, remainQuota: 123_456_789_012, models: ['m-a', 'm-b'], allowIps: ['127.0.0.1', '10.0.0.0/8'], group: 'vip', rateLimitRpm: 30, createdAt: now, updatedAt: now, lastUsedAt: now },
  ]).run();
  db.insert(sq.backupCodes).values({ id: 5, userId: 1, codeHash: 'bc', createdAt: now }).run();
  db.insert(sq.passwordResets).values({ id: 2, userId: 7, tokenHash: 'pr', expiresAt: now + 900, usedAt: now, createdAt: now }).run();
  db.insert(sq.channels).values({
    id: 4, name: 'c-"quoted"', type: 'openai', baseUrl: 'http://127.0.0.1:1', key: box.seal('sk-upstream-0123456789'), models: ['gpt-x', 'ünïcode'],
    modelMapping: { 'gpt-x': 'gpt-x-2025' }, headers: { 'x-org': 'o' }, status: 3, statusReason: 'probe failed', testedAt: now, createdAt: now, updatedAt: now,
  }).run();
  db.insert(sq.prices).values([
    { model: 'gpt-x', input: 1_500_000, output: 7_500_000, cacheRead: 150_000, webSearch: 12_345_678_901, codeExecution: 9_876_543_210, updatedAt: now },
    { model: 'gpt-y', updatedAt: now },
  ]).run();
  db.insert(sq.usageLogs).values({
    id: 100, requestId: 'req_1', userId: 7, apiKeyId: 12, channelId: 4, model: 'gpt-x', stream: true, inputTokens: 10, outputTokens: 20, webSearchRequests: 3, codeExecutionRequests: 5, cost: 165, latencyMs: 12, ttftMs: 3, status: 200, group: 'vip', priceRatio: 1500, createdAt: now,
  }).run();
  db.insert(sq.ledger).values([
    { id: 1, userId: 1, kind: 'adjust', amount: 999_999_999_999_999, balanceAfter: 999_999_999_999_999, ref: 'init', createdAt: now },
    { id: 9, userId: 7, kind: 'charge', amount: -165, balanceAfter: -165, ref: 'req_1', actorId: null, note: 'n', createdAt: now },
  ]).run();
  db.insert(sq.topupOrders).values({ id: 6, tradeNo: 't-1', userId: 7, provider: 'providerA', amount: 500, currency: 'usd', credit: 2_500_000, status: 'paid', paymentRef: 'pi_1', clawedBack: 1_000_000, paidAt: now, createdAt: now, updatedAt: now }).run();
  db.insert(sq.topupReversals).values({ id: 9, tradeNo: 't-1', key: 'refund:ch_1', state: 'refunded', amount: 200, eventId: 'evt_2', updatedAt: now }).run();
  db.insert(sq.groups).values({ id: 2, name: 'vip', ratio: 1500, fallbacks: ['default'], rateLimitRpm: 60, rateLimitTpm: 123_456_789_012, maxConcurrency: 4, createdAt: now, updatedAt: now }).run();
  db.insert(sq.webhookEvents).values({ id: 8, provider: 'providerA', eventId: 'evt_1', type: 'checkout.session.completed', outcome: 'credited', receivedAt: now }).run();
  db.insert(sq.redemptionCodes).values({ id: 4, codeHash: 'a'.repeat(64), prefix: 'gwr_abcd', batch: 'promo', quota: 5_000_000_000_000, status: 'redeemed', expiresAt: now + 86_400, createdBy: 1, createdAt: now, redeemedBy: 7, redeemedAt: now }).run();
  db.insert(sq.budgets).values({ id: 3, scope: 'key', subjectId: 12, period: 'monthly', limitAmount: 123_456_789_012_345, periodKey: '2025-11', spent: 9_007_199_254_740, alerted: 3, createdAt: now, updatedAt: now }).run();
  db.insert(sq.lowBalanceAlerts).values({ id: 1, userId: 7, threshold: 5_000_000_000_000, createdAt: now, updatedAt: now }).run();
  db.insert(sq.alertOutbox).values({ id: 4, eventId: 'evt_0123', type: 'budget.threshold', payload: '{"id":"evt_0123","data":{"note":"ünïcode \\"q\\""}}', status: 'failed', attempts: 12, nextAttemptAt: now, lastError: 'HTTP 503', createdAt: 1_763_900_000, deliveredAt: null }).run();
  db.insert(sq.alertCaps).values({ id: 2, capKey: 'keys-of:7:monthly', periodKey: '2026-11', n: 30, expiresAt: 1_764_547_200_000 }).run();
  db.insert(sq.deletedApiKeys).values({ id: 13, userId: 7 }).run();
  db.insert(sq.realtimeSessions).values({ id: 2, sessionId: 'rt_1', userId: 7, apiKeyId: 12, model: 'gpt-realtime', startedAt: now, endedAt: now + 5, durationMs: 5, bytesIn: 4_294_967_296, closeCode: 1000 }).run();
}

function sqliteRows(db: Db, table: ReturnType<typeof copyOrder>[number]) {
  return db.select().from(table.sqlite).orderBy(asc(table.key)).all();
}

describe.skipIf(!available)('db:copy (SQLite → PostgreSQL)', () => {
  const dbPath = join(dir, 'gateway.db');
  const schema = freshSchema('gw_copy');
  schemas.push(schema);

  test('copies every table with ids kept, and new rows get fresh ids', async () => {
    const src = openDatabase(dbPath, { checkpointMs: 0 });
    seed(src.db);
    const tables = copyOrder();
    // Every table is seeded: a table added later without a row here fails this line.
    for (const t of tables) expect({ table: t.name, rows: sqliteRows(src.db, t).length > 0 }).toEqual({ table: t.name, rows: true });
    src.close();

    const run = await runCopy(['--from', `sqlite:${dbPath}`, '--to', PG_TEST_URL, '--schema', schema]);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    // Parents come before children: users before everything that references it.
    const printed = run.stdout.trim().split('\n');
    expect(printed.slice(0, -1).map((l) => l.split(/\s+/)[0])).toEqual(tables.map((t) => t.name));
    expect(printed.indexOf(printed.find((l) => l.startsWith('users '))!)).toBeLessThan(printed.findIndex((l) => l.startsWith('api_keys ')));

    const again = openDatabase(dbPath, { checkpointMs: 0 });
    const pg = await openPostgres(PG_TEST_URL, { schema, max: 1 });
    try {
      for (const t of tables) {
        const expected = sqliteRows(again.db, t);
        // Every column the source has (the target may already have columns the source lacks).
        const pgCols = getTableColumns(t.pg);
        const shared = Object.fromEntries(Object.keys(getTableColumns(t.sqlite)).map((k) => [k, pgCols[k]!]));
        const actual = await pg.db.select(shared).from(t.pg).orderBy(asc(pgCols[t.keyProp]!));
        expect({ table: t.name, rows: actual }).toEqual({ table: t.name, rows: expected });
        expect(printed).toContain(`${t.name.padEnd(20)} ${expected.length}`);
      }
      // A null JSON list (every model allowed) stays SQL NULL, not the JSON value null.
      const [{ n }] = await pg.sql<{ n: number }[]>`select count(*)::int as n from api_keys where models is null and allow_ips is null`;
      expect(n).toBe(1);
      const [{ kind }] = await pg.sql<{ kind: string }[]>`select jsonb_typeof(models) as kind from channels`;
      expect(kind).toBe('array');

      // Sequences moved past the copied ids: inserts without an id neither collide nor reuse.
      const [u] = await pg.db.insert(pgSchema.users).values({ username: 'new', passwordHash: 'h', createdAt: 1, updatedAt: 1 }).returning();
      expect(u!.id).toBe(8);
      const [l] = await pg.db.insert(pgSchema.ledger).values({ userId: 8, kind: 'adjust', amount: 1, balanceAfter: 1, ref: 'r2', createdAt: 1 }).returning();
      expect(l!.id).toBe(10);
      const [log] = await pg.db.insert(pgSchema.usageLogs).values({ requestId: 'req_2', userId: 8, apiKeyId: 12, model: 'gpt-x', status: 200, createdAt: 1 }).returning();
      expect(log!.id).toBe(101);
    } finally {
      again.close();
      await pg.close();
    }
  });

  test('refuses a non-empty target without --force and leaves it untouched; --force replaces it', async () => {
    const refused = await runCopy(['--from', `sqlite:${dbPath}`, '--to', PG_TEST_URL, '--schema', schema]);
    expect(refused.code).toBe(1);
    expect(refused.stderr.trim().split('\n')).toHaveLength(1);
    expect(refused.stderr).toContain('is not empty');
    expect(refused.stderr).toContain('--force');
    const pg = await openPostgres(PG_TEST_URL, { schema, max: 1 });
    try {
      expect((await pg.db.select().from(pgSchema.users)).map((u) => u.username).sort()).toEqual(['alice', 'new', 'root']);
      const forced = await runCopy(['--from', `sqlite:${dbPath}`, '--to', PG_TEST_URL, '--schema', schema, '--force']);
      expect(forced.code).toBe(0);
      expect((await pg.db.select().from(pgSchema.users)).map((u) => u.username).sort()).toEqual(['alice', 'root']);
      const [u] = await pg.db.insert(pgSchema.users).values({ username: 'again', passwordHash: 'h', createdAt: 1, updatedAt: 1 }).returning();
      expect(u!.id).toBe(8);
    } finally {
      await pg.close();
    }
  });

  test('a row PostgreSQL cannot store aborts the whole copy: nothing is written, one line, exit 1', async () => {
    const path = join(dir, 'bad.db');
    const src = openDatabase(path, { checkpointMs: 0 });
    seed(src.db);
    // PostgreSQL text cannot hold NUL; realtime_sessions is copied after users, ledger, channels…
    src.sqlite.run(`update realtime_sessions set close_reason = 'a' || char(0) || 'b'`);
    src.close();
    const target = freshSchema('gw_copy_bad');
    schemas.push(target);
    const run = await runCopy(['--from', `sqlite:${path}`, '--to', PG_TEST_URL, '--schema', target]);
    expect(run.code).toBe(1);
    expect(run.stderr.trim().split('\n')).toHaveLength(1);
    expect(run.stderr).toStartWith('db copy failed: copying realtime_sessions failed: ');
    // The driver's reason, not drizzle's echo of the statement and its parameters.
    expect(run.stderr).not.toContain('params:');
    expect(run.stdout).toBe('');
    const pg = await openPostgres(PG_TEST_URL, { schema: target, max: 1 });
    try {
      for (const t of copyOrder()) expect({ table: t.name, rows: (await pg.db.select({ one: sql`1` }).from(t.pg)).length }).toEqual({ table: t.name, rows: 0 });
    } finally {
      await pg.close();
    }
  });

  test('an id SQLite gave a row since deleted is not given again in PostgreSQL', async () => {
    // SQLite's AUTOINCREMENT never reuses an id (sqlite_sequence keeps the highest ever given); the sequences were set
    // past the highest id left, so a deleted key's id went to the next key created after the move: its usage rows,
    // counters and key budget (kept by key id) then read as the new key's, another user's.
    const path = join(dir, 'deleted.db');
    const src = openDatabase(path, { checkpointMs: 0 });
    seed(src.db);
    src.db.insert(sq.apiKeys).values({ id: 13, userId: 7, keyHash: 'k3', prefix: 'sk-3', models: null, allowIps: null, createdAt: 1, updatedAt: 1 }).run();
    src.sqlite.run('delete from api_keys where id = 13');
    src.close();
    const target = freshSchema('gw_copy_seq');
    schemas.push(target);
    const run = await runCopy(['--from', `sqlite:${path}`, '--to', PG_TEST_URL, '--schema', target]);
    expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: '' });
    const pg = await openPostgres(PG_TEST_URL, { schema: target, max: 1 });
    try {
      const [k] = await pg.db.insert(pgSchema.apiKeys).values({ userId: 1, keyHash: 'k4', prefix: 'sk-4', createdAt: 1, updatedAt: 1 }).returning();
      expect(k!.id).toBe(14);
      // A table whose highest id is still there starts right after it, as before.
      const [u] = await pg.db.insert(pgSchema.users).values({ username: 'new', passwordHash: 'h', createdAt: 1, updatedAt: 1 }).returning();
      expect(u!.id).toBe(8);
    } finally {
      await pg.close();
    }
  });

  test('money beyond 2^53 is copied exactly, not as the double a JS number rounds it to', async () => {
    // The gateway never writes such a balance (MAX_BALANCE), but a row edited by hand or left by an older version can
    // hold one; both databases store 64 bits, and the gateway refuses to admit on it (balance_inexact) rather than
    // guess. The copy read it as a JS number: 2^53 + 1 arrived as 2^53, a changed balance no one would see.
    const path = join(dir, 'huge.db');
    const src = openDatabase(path, { checkpointMs: 0 });
    seed(src.db);
    src.sqlite.run('update users set quota = 9007199254740993, used_quota = -9007199254740995 where id = 7');
    src.sqlite.run('update ledger set amount = 9223372036854775807 where id = 9');
    src.close();
    const target = freshSchema('gw_copy_huge');
    schemas.push(target);
    const run = await runCopy(['--from', `sqlite:${path}`, '--to', PG_TEST_URL, '--schema', target]);
    expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: '' });
    const pg = await openPostgres(PG_TEST_URL, { schema: target, max: 1 });
    try {
      expect([...await pg.sql`select quota::text as q, used_quota::text as u from users where id = 7`]).toEqual([{ q: '9007199254740993', u: '-9007199254740995' }]);
      expect([...await pg.sql`select amount::text as a from ledger order by id`]).toEqual([{ a: '999999999999999' }, { a: '9223372036854775807' }]);
    } finally {
      await pg.close();
    }
  });

  test('a SQLite gateway killed with charges not yet written is refused: nothing copied, one line naming the way out', async () => {
    // A SQLite gateway journals each charge (`<db>.settlements/`) before writing it in batches, and keeps checkpoints
    // of running streams in realtime_unfinished: its next start bills both. Copied as they were, neither ever was:
    // PostgreSQL nodes do not read the journal, and the checkpoint table is not copied.
    for (const leftover of ['journal', 'checkpoint'] as const) {
      const path = join(dir, `killed-${leftover}.db`);
      const src = openDatabase(path, { checkpointMs: 0 });
      seed(src.db);
      if (leftover === 'checkpoint') {
        src.sqlite.run(`insert into realtime_unfinished (request_id, row, updated_at) values ('req_cut', '{}', 1)`);
      }
      src.close();
      if (leftover === 'journal') {
        mkdirSync(`${path}.settlements`, { mode: 0o700 });
        // A segment as the journal leaves it: complete lines, then the unused zeros.
        writeFileSync(join(`${path}.settlements`, 'settle-3.jsonl'), Buffer.concat([Buffer.from('{"requestId":"req_9","cost":165}\n'), Buffer.alloc(64)]));
        // An emptied (retired) segment holds no charge.
        writeFileSync(join(`${path}.settlements`, 'settle-2.jsonl'), Buffer.alloc(64));
      }
      const target = freshSchema('gw_copy_killed');
      schemas.push(target);
      const run = await runCopy(['--from', `sqlite:${path}`, '--to', PG_TEST_URL, '--schema', target]);
      expect({ leftover, code: run.code, stdout: run.stdout, lines: run.stderr.trim().split('\n').length }).toEqual({ leftover, code: 1, stdout: '', lines: 1 });
      expect(run.stderr).toContain(leftover === 'journal' ? '1 journaled charge' : '1 running stream');
      expect(run.stderr).toContain('start the gateway on it once');
      const pg = await openPostgres(PG_TEST_URL, { schema: target, max: 1 });
      try {
        expect((await pg.db.select().from(pgSchema.users)).length).toBe(0);
      } finally {
        await pg.close();
      }
    }
    // Emptied segments alone (a clean stop keeps none, an older version's retired ones may stay) do not block a copy.
    const clean = join(dir, 'clean.db');
    const src = openDatabase(clean, { checkpointMs: 0 });
    seed(src.db);
    // While a gateway holds the database (here this process, through the same lock) the copy is refused outright.
    const busy = await runCopy(['--from', `sqlite:${clean}`, '--to', PG_TEST_URL, '--schema', freshSchema('gw_copy_busy')]);
    expect({ code: busy.code, lines: busy.stderr.trim().split('\n').length }).toEqual({ code: 1, lines: 1 });
    expect(busy.stderr).toContain('is using this database');
    src.close();
    mkdirSync(`${clean}.settlements`, { mode: 0o700 });
    writeFileSync(join(`${clean}.settlements`, 'settle-7.jsonl'), Buffer.alloc(64));
    const target = freshSchema('gw_copy_clean');
    schemas.push(target);
    expect((await runCopy(['--from', `sqlite:${clean}`, '--to', PG_TEST_URL, '--schema', target])).code).toBe(0);
  });

  test('the key the nodes will use must open the sealed channel keys and 2FA secrets, or nothing is copied', async () => {
    // Copied sealed, they open only with the SQLite gateway's key: nodes with another skipped every channel key
    // and refused every 2FA code, and the copy said nothing.
    const path = join(dir, 'keys.db');
    const src = openDatabase(path, { checkpointMs: 0 });
    seed(src.db);
    src.close();
    const copy = (env: Record<string, string>) => {
      const target = freshSchema('gw_copy_key');
      schemas.push(target);
      return runCopy(['--from', `sqlite:${path}`, '--to', PG_TEST_URL, '--schema', target], env);
    };
    const wrong = await copy({ SECRET_KEY: 'ab'.repeat(32) });
    expect({ code: wrong.code, stdout: wrong.stdout, lines: wrong.stderr.trim().split('\n').length }).toEqual({ code: 1, stdout: '', lines: 1 });
    expect(wrong.stderr).toContain('no sealed value opens with SECRET_KEY (channel 4 key 1, user 1 2FA secret)');
    const none = await copy({});
    expect(none.code).toBe(1);
    expect(none.stderr).toContain('neither SECRET_KEY nor');
    // Without SECRET_KEY, the key file the SQLite gateway made beside its database.
    const own = join(dir, 'own');
    mkdirSync(own);
    const ownPath = join(own, 'gateway.db');
    const o = openDatabase(ownPath, { checkpointMs: 0 });
    seed(o.db);
    // A key sealed under some older key: already unusable, named in a warning, not a reason to refuse the rest.
    o.db.insert(sq.channels).values({ id: 5, name: 'old', type: 'openai', baseUrl: 'http://127.0.0.1:1', key: new SecretBox(Buffer.alloc(32, 1)).seal('sk-x'), models: [], modelMapping: {}, headers: {}, createdAt: 1, updatedAt: 1 }).run();
    o.close();
    writeFileSync(join(own, 'secret.key'), KEY);
    const target = freshSchema('gw_copy_keyfile');
    schemas.push(target);
    const ok = await runCopy(['--from', `sqlite:${ownPath}`, '--to', PG_TEST_URL, '--schema', target], {});
    expect(ok.code).toBe(0);
    expect(ok.stderr).toStartWith(`warning: 1 of 3 sealed values do not open with ${join(own, 'secret.key')} (channel 5 key 1)`);
    expect(ok.stderr.trim().split('\n')).toHaveLength(1);
  });

  test('bad arguments: one line, exit 1, no file created', async () => {
    const missing = join(dir, 'missing.db');
    const cases: [string[], string][] = [
      [['--to', PG_TEST_URL], 'usage: bun run db:copy'],
      [['--from', `sqlite:${missing}`, '--to', PG_TEST_URL], `no SQLite database at ${missing}`],
      [['--from', 'sqlite::memory:', '--to', PG_TEST_URL], '--from must be sqlite:'],
      [['--from', `sqlite:${dbPath}`, '--to', 'mysql://x'], '--to must be a postgres://'],
      [['--from', `sqlite:${dbPath}`, '--to', PG_TEST_URL, '--schema', 'Bad-Name'], 'invalid PostgreSQL schema name'],
      [['--from', `sqlite:${dbPath}`, '--to', PG_TEST_URL, '--bogus'], 'db copy failed:'],
    ];
    for (const [args, message] of cases) {
      const run = await runCopy(args);
      expect({ args, code: run.code, lines: run.stderr.trim().split('\n').length }).toEqual({ args, code: 1, lines: 1 });
      expect(run.stderr).toContain(message);
    }
    expect(await Bun.file(missing).exists()).toBe(false);
  });
});
