/**
 * PostgreSQL checkpoints of running realtime responses (realtime_unfinished, migration pg/0023). The node's writes are
 * queued off its request path and must stay ordered per request id, whatever connection of the pool each goes out
 * on: a put sent before a drop never lands after it (the row would come back, and be billed after the node dies),
 * and a response streaming faster than the database answers costs one statement in flight, not a queue. Ordering is
 * checked against a statement runner whose answers take as long as each test says (the pool's connections run them
 * in parallel, so a slow one lands last); the statements themselves against a real PostgreSQL.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { openPgTestDb, requirePg, type PgTestDb } from '../../../../tests/helpers/postgres';
import type { SettlementRow } from '../repos/settlements';
import type { PgSql } from './client';
import { CHECKPOINT_STATEMENTS, PgRealtimeUnfinished, pgUnfinishedRows } from './realtime-unfinished';

const row = (requestId: string, cost: number): SettlementRow => ({
  requestId, kind: 'realtime', userId: 1, apiKeyId: 1, channelId: null, model: 'gpt-realtime', upstreamModel: 'gpt-realtime', stream: true,
  inputTokens: 10, outputTokens: 2, cacheReadTokens: 0, cacheWriteTokens: 0, cacheWrite1hTokens: 0, longContext: false, audioInputTokens: 0,
  audioOutputTokens: 0, webSearchRequests: 0, codeExecutionRequests: 0, cost, latencyMs: 0, ttftMs: null, status: 200,
  errorCode: 'gateway_crashed', usageFlag: 'estimated', attempts: 1, ip: '', createdAt: 1, group: '', priceRatio: 1000, billedModel: '', overrides: '',
});

/**
 * A statement runner like a pool: each statement runs at once on a connection of its own and takes `delays[n]` ms (the
 * n-th statement sent), its effect applied when it is answered. `fail` makes the n-th one fail.
 */
function slowPool(delays: number[], fail = new Set<number>()) {
  const table = new Map<string, number>();
  const sent: string[] = [];
  const sql = ((strings: TemplateStringsArray, ...values: unknown[]) => {
    const n = sent.length;
    const put = strings[0]!.trim().startsWith('insert');
    const id = values[0] as string;
    sent.push(`${put ? 'put' : 'drop'} ${id}`);
    return new Promise((done, failed) => setTimeout(() => {
      if (fail.has(n)) return failed(new Error(`statement ${n} failed`));
      if (put) table.set(id, (JSON.parse(values[2] as string) as SettlementRow).cost);
      else table.delete(id);
      done([]);
    }, delays[n] ?? 0));
  }) as unknown as PgSql;
  return { sql, table, sent };
}

describe('PgRealtimeUnfinished: writes queued, ordered per request id', () => {
  test('a drop sent while a slow put is in flight lands after it: the row is gone, not brought back', async () => {
    const pool = slowPool([60, 0]);
    const errors: unknown[] = [];
    const store = new PgRealtimeUnfinished(pool.sql, (...e) => errors.push(e));
    store.put(row('rt_a', 5), 'rt#1');
    store.drop('rt_a');
    // Returned at once: nothing was awaited on the caller's path.
    expect(pool.sent).toEqual(['put rt_a']);
    await store.idle();
    expect(pool.sent).toEqual(['put rt_a', 'drop rt_a']);
    expect(pool.table.has('rt_a')).toBe(false);
    expect(errors).toEqual([]);
    expect(store.pending).toBe(0);
  });

  test('writes waiting behind one in flight: only the latest is sent (a put after a drop keeps the row, with its last cost)', async () => {
    const pool = slowPool([40, 0, 0]);
    const store = new PgRealtimeUnfinished(pool.sql, () => {});
    store.put(row('rt_b', 1), 'rt#2');
    for (let i = 2; i <= 100; i++) store.put(row('rt_b', i), 'rt#2');
    store.drop('rt_b');
    store.put(row('rt_b', 500), 'rt#2');
    await store.idle();
    expect(pool.sent).toEqual(['put rt_b', 'put rt_b']);
    expect(pool.table.get('rt_b')).toBe(500);
  });

  test('request ids do not wait for each other', async () => {
    const pool = slowPool([80, 0]);
    const store = new PgRealtimeUnfinished(pool.sql, () => {});
    store.put(row('rt_slow', 1), 'rt#3');
    store.put(row('rt_fast', 2), 'rt#4');
    expect(pool.sent).toEqual(['put rt_slow', 'put rt_fast']);
    await Bun.sleep(20);
    expect([...pool.table.keys()]).toEqual(['rt_fast']);
    await store.idle();
  });

  test('however many responses write at once, at most CHECKPOINT_STATEMENTS statements are in flight; every row lands', async () => {
    const pool = slowPool(Array.from({ length: 40 }, () => 15));
    let inFlight = 0;
    let most = 0;
    const counted = ((strings: TemplateStringsArray, ...values: unknown[]) => {
      inFlight++;
      most = Math.max(most, inFlight);
      return (pool.sql as any)(strings, ...values).finally(() => { inFlight--; });
    }) as unknown as PgSql;
    const store = new PgRealtimeUnfinished(counted, () => {});
    for (let i = 0; i < 20; i++) store.put(row(`rt_many${i}`, i), `rt#m${i}`);
    // A response still streaming while it waits: only its latest state is sent.
    for (let c = 100; c < 110; c++) store.put(row('rt_many19', c), 'rt#m19');
    expect(pool.sent.length).toBe(CHECKPOINT_STATEMENTS);
    await store.idle();
    expect(most).toBe(CHECKPOINT_STATEMENTS);
    expect(pool.table.size).toBe(20);
    expect(pool.table.get('rt_many19')).toBe(109);
    expect(pool.sent.length).toBe(20);
  });

  test('a failed statement is reported, never thrown to the caller, and the next one of the id still goes', async () => {
    const pool = slowPool([10, 0], new Set([0]));
    const errors: Array<[string, string]> = [];
    const store = new PgRealtimeUnfinished(pool.sql, (id, op) => errors.push([id, op]));
    store.put(row('rt_c', 3), 'rt#5');
    store.drop('rt_c');
    await store.idle();
    expect(errors).toEqual([['rt_c', 'put']]);
    expect(pool.sent).toEqual(['put rt_c', 'drop rt_c']);
    expect(pool.table.has('rt_c')).toBe(false);
  });
});

const pg = await requirePg('libs/db/src/pg/realtime-unfinished.test.ts');
let t: PgTestDb;
beforeAll(async () => { if (pg) t = await openPgTestDb('gw_rt_unfinished'); });
afterAll(async () => { if (pg) await t?.close(); });

describe.skipIf(!pg)('realtime_unfinished in PostgreSQL', () => {
  test('put replaces, drop deletes; the leader reads a hold\'s rows, sweeps settled ones, and skips a row it did not write', async () => {
    const sql = t.handle.sql;
    const errors: unknown[] = [];
    const store = new PgRealtimeUnfinished(sql, (...e) => errors.push(e));
    const rows = pgUnfinishedRows(sql);
    store.put(row('rt_s_resp_1', 10), 'rt_s#1');
    store.put(row('rt_s_resp_1', 20), 'rt_s#1');
    store.put(row('rt_s_resp_2', 30), 'rt_s#2');
    store.put(row('rt_s_resp_3', 40), 'rt_s#3');
    store.drop('rt_s_resp_3');
    await store.idle();
    expect(errors).toEqual([]);
    expect(await rows.heldBy('rt_s#1')).toEqual([{ requestId: 'rt_s_resp_1', row: row('rt_s_resp_1', 20) }]);
    expect(await rows.heldBy('rt_s#3')).toEqual([]);
    // A row naming another request id (edited by hand): read as null, never billed under that id.
    await sql`insert into realtime_unfinished (request_id, hold_ref, row, updated_at) values ('rt_s_odd', 'rt_s#9', ${JSON.stringify(row('other', 5))}, 0)`;
    expect(await rows.heldBy('rt_s#9')).toEqual([{ requestId: 'rt_s_odd', row: null }]);
    await rows.remove('rt_s_odd');
    // Settled (a usage row under its request id): swept; the other stays.
    await sql`insert into usage_logs (request_id, user_id, api_key_id, model, status, created_at) values ('rt_s_resp_2', 1, 1, 'gpt-realtime', 200, 1)`;
    expect(await rows.sweepSettled()).toBe(1);
    expect((await sql`select request_id from realtime_unfinished order by request_id`).map((r) => r.request_id)).toEqual(['rt_s_resp_1']);
  });
});
