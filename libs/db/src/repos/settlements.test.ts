import { afterEach, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase, type DbHandle } from '../client';
import { SettlementsRepo, type SettlementRow } from './settlements';

// A batch writes each user's and key's counters once, when its transaction ends. These tests pin that a
// batch leaves exactly the rows that one transaction per settlement leaves, and that a batch that fails
// leaves nothing of itself behind, including in the repository's own running balances.

const dirs: string[] = [];
const handles: DbHandle[] = [];
afterEach(() => {
  for (const h of handles.splice(0)) h.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A database with users 1..3 (balances 10,000 / 500 / 0) and keys 1..4 (keys 2 and 4 limited to 700). */
function seeded(): { h: DbHandle; repo: SettlementsRepo } {
  const dir = mkdtempSync(join(tmpdir(), 'settle-batch-'));
  dirs.push(dir);
  const h = openDatabase(join(dir, 'db.sqlite'), { checkpointMs: 0 });
  handles.push(h);
  const q = h.sqlite;
  for (const [id, quota] of [[1, 10_000], [2, 500], [3, 0]]) {
    q.run(`INSERT INTO users (id, username, password_hash, quota, used_quota, request_count, created_at, updated_at) VALUES (?, ?, 'x', ?, 0, 0, 1, 1)`, [id!, `u${id}`, quota!]);
  }
  for (const [id, user, limited] of [[1, 1, 0], [2, 1, 1], [3, 2, 0], [4, 3, 1]]) {
    q.run(`INSERT INTO api_keys (id, user_id, key_hash, prefix, unlimited_quota, remain_quota, created_at, updated_at) VALUES (?, ?, ?, 'sk-', ?, 700, 1, 1)`, [id!, user!, `h${id}`, limited ? 0 : 1]);
  }
  return { h, repo: new SettlementsRepo(h.sqlite) };
}

const keyUser: Record<number, number> = { 1: 1, 2: 1, 3: 2, 4: 3 };
const row = (requestId: string, apiKeyId: number, cost: number, status: number, createdAt: number): SettlementRow => ({
  requestId, kind: 'messages', userId: keyUser[apiKeyId]!, apiKeyId, channelId: null, model: 'm', upstreamModel: 'm', stream: false,
  inputTokens: 1, outputTokens: 2, cacheReadTokens: 0, cacheWriteTokens: 0, audioInputTokens: 0, audioOutputTokens: 0,
  cost, latencyMs: 1, ttftMs: null, status, errorCode: '', attempts: 1, ip: '', createdAt,
});

/** Everything a settlement can change, in a stable order. */
function books(h: DbHandle) {
  const q = h.sqlite;
  return {
    users: q.query('SELECT id, quota, used_quota, request_count, updated_at FROM users ORDER BY id').all(),
    keys: q.query('SELECT id, used_quota, remain_quota, last_used_at FROM api_keys ORDER BY id').all(),
    ledger: q.query('SELECT user_id, kind, amount, balance_after, ref, created_at FROM ledger ORDER BY id').all(),
    usage: q.query('SELECT request_id, user_id, api_key_id, cost, status, created_at FROM usage_logs ORDER BY id').all(),
  };
}

test('a batch charges exactly as one transaction per settlement would: balances after each charge, counters, last use', () => {
  const { h, repo } = seeded();
  const out: unknown[] = [];
  repo.transaction(() => {
    out.push(repo.apply(row('a', 1, 100, 200, 10)));
    out.push(repo.apply(row('b', 3, 50, 200, 11)));
    out.push(repo.apply(row('c', 2, 0, 200, 12))); // free and successful: counted, not charged
    out.push(repo.apply(row('d', 2, 30, 500, 13))); // charged, not counted as a success
    out.push(repo.apply(row('a', 1, 999, 200, 14))); // the same request again: nothing
    out.push(repo.apply(row('e', 3, 0, 400, 9))); // free failure: last use only
    out.push(repo.apply(row('f', 1, 70, 200, 8))); // an earlier timestamp: last use keeps the latest
  });
  expect(out).toEqual([
    { inserted: true, balance: 9_900 }, { inserted: true, balance: 450 }, { inserted: true, balance: undefined },
    { inserted: true, balance: 9_870 }, { inserted: false }, { inserted: true, balance: undefined }, { inserted: true, balance: 9_800 },
  ]);
  const b = books(h);
  expect(b.users).toEqual([
    // updated_at is the last charge's time, in order of application (as the per-row UPDATE wrote it).
    { id: 1, quota: 9_800, used_quota: 200, request_count: 3, updated_at: 8 },
    { id: 2, quota: 450, used_quota: 50, request_count: 1, updated_at: 11 },
    { id: 3, quota: 0, used_quota: 0, request_count: 0, updated_at: 1 },
  ]);
  expect(b.keys).toEqual([
    { id: 1, used_quota: 170, remain_quota: 700, last_used_at: 10 },
    { id: 2, used_quota: 30, remain_quota: 670, last_used_at: 13 },
    { id: 3, used_quota: 50, remain_quota: 700, last_used_at: 11 },
    { id: 4, used_quota: 0, remain_quota: 700, last_used_at: null },
  ]);
  expect(b.ledger.map((l: any) => [l.ref, l.amount, l.balance_after])).toEqual([['a', -100, 9_900], ['b', -50, 450], ['d', -30, 9_870], ['f', -70, 9_800]]);
  expect(b.usage.map((u: any) => u.request_id)).toEqual(['a', 'b', 'c', 'd', 'e', 'f']);
});

test('random batches leave the same books as one transaction per settlement', () => {
  let seed = 42;
  const rand = (n: number) => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) % n);
  const rows: SettlementRow[] = [];
  for (let i = 0; i < 400; i++) {
    // Some ids repeat (retries), some charges are free or failed; key 4's user has no balance and goes negative.
    const id = rand(10) === 0 && i > 0 ? rows[rand(i)]!.requestId : `r${i}`;
    rows.push(row(id, 1 + rand(4), rand(5) === 0 ? 0 : 1 + rand(400), rand(6) === 0 ? 500 : 200, 1_000 + rand(50)));
  }
  const single = seeded();
  const singleOut = rows.map((r) => { let o: unknown; single.repo.transaction(() => { o = single.repo.apply(r); }); return o; });
  const batched = seeded();
  const batchedOut: unknown[] = [];
  for (let i = 0; i < rows.length;) {
    const n = 1 + rand(40);
    const part = rows.slice(i, i + n);
    batched.repo.transaction(() => { for (const r of part) batchedOut.push(batched.repo.apply(r)); });
    i += n;
  }
  expect(batchedOut).toEqual(singleOut);
  expect(books(batched.h)).toEqual(books(single.h));
  expect(books(batched.h).ledger.length).toBeGreaterThan(200);
});

test('a batch that fails leaves nothing of itself, and the next batch starts from the committed balances', () => {
  const { h, repo } = seeded();
  repo.transaction(() => { repo.apply(row('a', 1, 100, 200, 10)); });
  expect(() => repo.transaction(() => {
    repo.apply(row('b', 1, 1_000, 200, 11));
    repo.apply(row('c', 3, 20, 200, 11));
    repo.apply({ ...row('x', 1, 5, 200, 12), userId: 987_654 }); // no such user
  })).toThrow('no user 987654');
  expect(books(h).ledger.map((l: any) => l.ref)).toEqual(['a']);
  expect(repo.apply(row('b', 1, 1_000, 200, 13))).toEqual({ inserted: true, balance: 8_900 });
  expect(repo.apply(row('c', 3, 20, 200, 13))).toEqual({ inserted: true, balance: 480 });
  const b = books(h);
  expect(b.users.slice(0, 2)).toEqual([
    { id: 1, quota: 8_900, used_quota: 1_100, request_count: 2, updated_at: 13 },
    { id: 2, quota: 480, used_quota: 20, request_count: 1, updated_at: 13 },
  ]);
  expect(b.keys.slice(0, 3).map((k: any) => k.used_quota)).toEqual([1_100, 0, 20]);
});

test('the balance read at a user\'s first charge is the committed one, also after a write outside the batch', () => {
  const { h, repo } = seeded();
  repo.transaction(() => { repo.apply(row('a', 1, 100, 200, 10)); });
  h.sqlite.run('UPDATE users SET quota = quota + 5000 WHERE id = 1'); // a top-up between batches
  expect(repo.apply(row('b', 1, 1, 200, 11))).toEqual({ inserted: true, balance: 14_899 });
});

test('a transaction inside the batch that fails takes back its rows and its part of the counters, like a savepoint', () => {
  const { h, repo } = seeded();
  const out: unknown[] = [];
  repo.transaction(() => {
    out.push(repo.apply(row('a', 1, 100, 200, 10)));
    expect(() => repo.transaction(() => {
      out.push(repo.apply(row('b', 2, 200, 200, 11)));
      throw new Error('inner failure');
    })).toThrow('inner failure');
    out.push(repo.apply(row('c', 1, 50, 200, 12)));
  });
  expect(out).toEqual([{ inserted: true, balance: 9_900 }, { inserted: true, balance: 9_700 }, { inserted: true, balance: 9_850 }]);
  const b = books(h);
  expect(b.users[0]).toEqual({ id: 1, quota: 9_850, used_quota: 150, request_count: 2, updated_at: 12 });
  expect(b.keys.slice(0, 2)).toEqual([{ id: 1, used_quota: 150, remain_quota: 700, last_used_at: 12 }, { id: 2, used_quota: 0, remain_quota: 700, last_used_at: null }]);
  expect(b.ledger.map((l: any) => [l.ref, l.balance_after])).toEqual([['a', 9_900], ['c', 9_850]]);
  expect(b.usage.map((u: any) => u.request_id)).toEqual(['a', 'c']);
});
