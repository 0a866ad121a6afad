/**
 * Raw SQL against a test gateway's database, whichever backend it runs on, for assertions on stored
 * rows (hashes not plaintext, exactly one ledger row, ...). Rows come back shaped as bun:sqlite gives
 * them: PostgreSQL bigint/numeric as numbers, booleans as 0/1, jsonb as its JSON text.
 */
import type { Services } from '../../apps/server/src/services';

export interface TestDb {
  all<T = any>(query: string, ...params: unknown[]): Promise<T[]>;
  /** The first row, or null (bun:sqlite's `.get()`). */
  get<T = any>(query: string, ...params: unknown[]): Promise<T | null>;
}

const INT8 = 20;
const NUMERIC = 1700;
const BOOL = 16;
const JSONB = 3802;
const JSON_OID = 114;

export function testDb(s: Services): TestDb {
  const all = async (query: string, ...params: unknown[]): Promise<any[]> => {
    // Settlements still queued (SQLite's journaled batch) are written first, as a management read would.
    s.relay.quota.flush();
    if (s.dbh) return s.dbh.sqlite.query(query).all(...(params as any[])) as any[];
    const pg = s.backend.pg!;
    let n = 0;
    const text = query.replace(/\?/g, () => `$${++n}`);
    const res = await pg.sql.unsafe(text, params as any[]);
    const conv = new Map<string, (v: any) => any>();
    for (const c of (res as any).columns ?? []) {
      if (c.type === INT8 || c.type === NUMERIC) conv.set(c.name, (v) => (v === null ? null : Number(v)));
      else if (c.type === BOOL) conv.set(c.name, (v) => (v === null ? null : v ? 1 : 0));
      else if (c.type === JSONB || c.type === JSON_OID) conv.set(c.name, (v) => (v === null ? null : JSON.stringify(v)));
    }
    return [...res].map((row: any) => {
      const out: any = {};
      for (const k of Object.keys(row)) out[k] = conv.has(k) ? conv.get(k)!(row[k]) : row[k];
      return out;
    });
  };
  return { all, get: async (query, ...params) => (await all(query, ...params))[0] ?? null };
}
