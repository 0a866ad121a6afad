/**
 * Bulk usage_logs rows for export tests and the statistics benchmark: one transaction, one prepared
 * statement, deterministic pseudo-random values (the same seed gives the same rows).
 */
import type { Database } from 'bun:sqlite';
import type { Services } from '../../apps/server/src/services';

export interface SeedOptions {
  rows: number;
  /** created_at of the first row; rows are spread evenly over `spanSeconds`. */
  from: number;
  spanSeconds: number;
  users?: number;
  keysPerUser?: number;
  channels?: number;
  models?: string[];
  /** Overrides the model of row i (e.g. hostile names). */
  modelOf?: (i: number) => string | undefined;
  requestPrefix?: string;
  seed?: number;
}

const COLUMNS = `request_id, kind, user_id, api_key_id, channel_id, model, upstream_model, stream,
    input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, audio_input_tokens, audio_output_tokens, cost, latency_ms, ttft_ms,
    status, error_code, attempts, ip, created_at`;

/** The seeded rows, in column order (`stream` as a boolean). */
function* seedRows(o: SeedOptions): Generator<unknown[]> {
  const users = o.users ?? 50;
  const keys = o.keysPerUser ?? 2;
  const channels = o.channels ?? 8;
  const models = o.models ?? ['claude-sonnet-4-5', 'claude-haiku-4-5', 'claude-opus-4-1', 'gpt-4o', 'gpt-4o-mini', 'gpt-realtime', 'o3', 'gemini-2.5-pro'];
  let s = o.seed ?? 42;
  // xorshift32: fast, deterministic, good enough for spreading values.
  const rnd = () => { s ^= s << 13; s ^= s >>> 17; s ^= s << 5; return (s >>> 0) / 4294967296; };
  const prefix = o.requestPrefix ?? 'req_seed_';
  const step = o.spanSeconds / o.rows;
  for (let i = 0; i < o.rows; i++) {
    const user = 1 + Math.floor(rnd() * users);
    const model = o.modelOf?.(i) ?? models[Math.floor(rnd() * rnd() * models.length)]!;
    const failed = rnd() < 0.02;
    const input = Math.floor(rnd() * 4000);
    const output = Math.floor(rnd() * 1000);
    const latency = Math.floor(200 * Math.exp(rnd() * 4));
    const realtime = model === 'gpt-realtime';
    yield [`${prefix}${i}`, realtime ? 'realtime' : 'messages', user, user * 100 + Math.floor(rnd() * keys), failed ? null : 1 + Math.floor(rnd() * channels),
      model, model, rnd() < 0.5, input, output, Math.floor(rnd() * 2000), Math.floor(rnd() * 200), realtime ? 300 : 0, realtime ? 600 : 0,
      failed ? 0 : input * 3 + output * 15, latency, Math.floor(latency / 4), failed ? 502 : 200, failed ? 'upstream_error' : '', 1, '127.0.0.1',
      Math.floor(o.from + i * step)];
  }
}

/** Inserts `rows` usage rows; returns how many were inserted. */
export function seedUsageRows(sqlite: Database, o: SeedOptions): number {
  const stmt = sqlite.prepare(`insert into usage_logs (${COLUMNS}) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
  sqlite.transaction(() => {
    for (const row of seedRows(o)) {
      row[7] = row[7] ? 1 : 0;
      stmt.run(...(row as any[]));
    }
  })();
  return o.rows;
}

/** seedUsageRows on a test gateway's database, whichever backend (PostgreSQL: multi-row inserts). */
export async function seedGatewayUsageRows(services: Services, o: SeedOptions): Promise<number> {
  if (services.dbh) return seedUsageRows(services.dbh.sqlite, o);
  const sql = services.backend.pg!.sql;
  const all = [...seedRows(o)];
  for (let i = 0; i < all.length; i += 1000) {
    const chunk = all.slice(i, i + 1000);
    const params: unknown[] = [];
    const values = chunk.map((row) => `(${row.map((v) => { params.push(v); return `$${params.length}`; }).join(', ')})`).join(', ');
    await sql.unsafe(`insert into usage_logs (${COLUMNS}) values ${values}`, params as any[]);
  }
  return o.rows;
}
