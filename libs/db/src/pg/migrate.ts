import type postgres from 'postgres';
import { readMigrationFiles } from 'drizzle-orm/migrator';

/** Same layout as drizzle's own migrations table, kept in the application's schema. */
const MIGRATIONS_TABLE = '__drizzle_migrations';

/**
 * drizzle-kit writes foreign-key targets as `"public"."users"` even for unqualified tables. The
 * migrations must follow `search_path` so any schema can hold the tables, so the qualifier is
 * dropped when applying (the file, and so its hash, stay as generated).
 */
const unqualify = (stmt: string) => stmt.replaceAll('"public".', '');

/**
 * Applies pending migrations in `schema`. drizzle's pg migrator takes no lock and reads the last
 * applied migration outside its transaction, so simultaneous starts would both apply it; here the
 * whole check-and-apply runs under a session-level advisory lock keyed by the schema, on one
 * reserved connection. Creating the schema is inside the lock too (concurrent `CREATE SCHEMA IF NOT
 * EXISTS` can fail with a unique violation).
 */
export async function applyPgMigrations(
  sql: postgres.Sql,
  opts: { schema: string; migrationsFolder: string },
): Promise<{ applied: number }> {
  const migrations = readMigrationFiles({ migrationsFolder: opts.migrationsFolder });
  const conn = await sql.reserve();
  const lockKey = `gw-migrate:${opts.schema}`;
  try {
    await conn`select pg_advisory_lock(hashtext(${lockKey}))`;
    try {
      await conn`create schema if not exists ${conn(opts.schema)}`;
      const table = conn(`${opts.schema}.${MIGRATIONS_TABLE}`);
      await conn`create table if not exists ${table} (id serial primary key, hash text not null, created_at bigint)`;
      const [last] = await conn<{ created_at: string }[]>`select created_at from ${table} order by created_at desc limit 1`;
      const lastMillis = last ? Number(last.created_at) : -Infinity;
      const pending = migrations.filter((m) => m.folderMillis > lastMillis);
      if (pending.length === 0) return { applied: 0 };
      await conn`begin`;
      try {
        for (const m of pending) {
          for (const stmt of m.sql) if (stmt.trim()) await conn.unsafe(unqualify(stmt));
          await conn`insert into ${table} (hash, created_at) values (${m.hash}, ${m.folderMillis})`;
        }
        await conn`commit`;
      } catch (err) {
        await conn`rollback`.catch(() => {});
        throw err;
      }
      return { applied: pending.length };
    } finally {
      await conn`select pg_advisory_unlock(hashtext(${lockKey}))`;
    }
  } finally {
    conn.release();
  }
}
