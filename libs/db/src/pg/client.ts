import type postgres from 'postgres';
import { connectPg, socketOptions } from './connect';
import { drizzle } from 'drizzle-orm/postgres-js';
import { join } from 'node:path';
import * as pgSchema from '../schema-pg';
import { applyPgMigrations } from './migrate';
import { reconnectBackoff } from './reconnect';
import { watchSilentSockets } from './silent-sockets';

export type PgDb = ReturnType<typeof drizzle<typeof pgSchema>>;
export type PgSql = postgres.Sql;

export interface PgHandle {
  db: PgDb;
  /** The postgres.js client behind `db`, for LISTEN, `reserve()` and raw statements. */
  sql: PgSql;
  /** The schema every connection of this handle works in (its `search_path`). */
  schema: string;
  close(): Promise<void>;
}

export interface OpenPostgresOptions {
  /** Schema holding the tables and the migrations table; created if missing. Default `public`. */
  schema?: string;
  /** Pool size. Default 10. */
  max?: number;
  /**
   * Seconds a connection attempt may take (postgres.js's default is 30). Default 5: a settlement retries
   * until its deadline (15 s), and an attempt stuck on an unanswered SYN should fail in time to be retried.
   */
  connectTimeout?: number;
  /**
   * A connection that wrote and then heard nothing for this long (ms) is closed as dead (see silent-sockets.ts).
   * Default 30 000; 0 turns it off. Not applied over TLS or to a URL naming several hosts.
   */
  silenceMs?: number;
}

/** Folder with drizzle-kit's generated PostgreSQL migrations (repo root /drizzle/pg). */
export const PG_MIGRATIONS_DIR = join(import.meta.dir, '..', '..', '..', '..', 'drizzle', 'pg');

/** A plain identifier only: it goes into the connection's search_path and into DDL. */
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * Opens a PostgreSQL pool whose connections all use `schema` (so each process or test run can keep
 * its own), and applies pending migrations before returning. Safe when several processes start at
 * once on the same schema: migrations run under an advisory lock, exactly once.
 */
export async function openPostgres(url: string, opts: OpenPostgresOptions = {}): Promise<PgHandle> {
  const schema = opts.schema ?? 'public';
  if (!SCHEMA_NAME.test(schema)) throw new Error(`invalid PostgreSQL schema name: ${JSON.stringify(schema)}`);
  const silenceMs = opts.silenceMs ?? 30_000;
  const watch = silenceMs > 0 && !usesTlsOrManyHosts(url) ? watchSilentSockets(silenceMs) : null;
  const sql = connectPg(url, {
    ...(watch ? { socket: watch.factory } : {}),
    max: opts.max ?? 10,
    connect_timeout: opts.connectTimeout ?? 5,
    connection: { search_path: schema },
    backoff: reconnectBackoff,
    // "already exists, skipping" notices from IF NOT EXISTS are expected, not news.
    onnotice: () => {},
  });
  try {
    await applyPgMigrations(sql, { schema, migrationsFolder: PG_MIGRATIONS_DIR });
  } catch (err) {
    watch?.stop();
    await sql.end({ timeout: 1 });
    throw err;
  }
  // Armed only now: a migration (an index on a large table) may legitimately run longer than the silence limit.
  watch?.arm();
  const db = drizzle({ client: sql, schema: pgSchema });
  return { db, sql, schema, close: () => { watch?.stop(); return sql.end({ timeout: 5 }); } };
}

/** TLS (any sslmode but disable) or a comma-separated host list: postgres.js's own sockets are kept. */
function usesTlsOrManyHosts(url: string): boolean {
  // A Unix socket never uses TLS (connectPg drops its sslmode, as libpq does).
  if (socketOptions(url)) return false;
  const q = url.indexOf('?');
  const params = new URLSearchParams(q >= 0 ? url.slice(q + 1) : '');
  const ssl = params.get('sslmode') ?? params.get('ssl');
  const authority = url.replace(/^[a-z]+:\/\//i, '').split(/[/?]/)[0]!;
  return (ssl !== null && ssl !== 'disable' && ssl !== 'false') || authority.includes(',');
}
