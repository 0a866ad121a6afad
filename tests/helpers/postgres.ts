/**
 * PostgreSQL for tests: one server (GW_TEST_PG, default the local trust-auth one), a fresh schema per
 * test file so parallel runs never see each other's rows.
 */
import postgres from 'postgres';

export const PG_TEST_URL = process.env.GW_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test';

/** True when a connection and a trivial query succeed within 3 s. */
export async function pgReachable(url = PG_TEST_URL): Promise<boolean> {
  const sql = postgres(url, { max: 1, connect_timeout: 3, onnotice: () => {} });
  try {
    await sql`select 1`;
    return true;
  } catch {
    return false;
  } finally {
    await sql.end({ timeout: 1 }).catch(() => {});
  }
}

/** Resolves once per file: the probe result, with one line explaining a skip. */
export async function requirePg(what: string): Promise<boolean> {
  const ok = await pgReachable();
  if (!ok) console.warn(`SKIPPED ${what}: PostgreSQL is unreachable at ${PG_TEST_URL} (run scripts/ci-services.sh or set GW_TEST_PG)`);
  return ok;
}

/** A schema name no other run uses. */
export function freshSchema(prefix: string): string {
  return `${prefix}_${process.pid}_${Math.random().toString(36).slice(2, 10)}`;
}

export async function dropSchema(schema: string, url = PG_TEST_URL): Promise<void> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await sql`drop schema if exists ${sql(schema)} cascade`;
  } finally {
    await sql.end({ timeout: 1 });
  }
}
