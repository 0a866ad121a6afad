/**
 * Databases for the tests of one migration's statements, on both backends: a migrated SQLite file in a temporary
 * folder, and a migrated PostgreSQL schema of its own (dropped after the test file).
 */
import { afterAll } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase, type DbHandle } from '../../libs/db/src/client';
import { openPostgres, type PgHandle } from '../../libs/db/src/pg/client';
import { dropSchema, freshSchema, PG_TEST_URL } from './postgres';

/** A migrated SQLite database for the length of `fn`, then closed and removed. */
export async function withSqliteFile<T>(fn: (h: DbHandle) => Promise<T>): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-mig-'));
  const h = openDatabase(join(dir, 'db.sqlite'), { checkpointMs: 0 });
  try {
    return await fn(h);
  } finally {
    h.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A fresh PostgreSQL schema (`name` prefixes it): `open()` migrates and connects; closed and dropped after the file. */
export function pgSchemaOfFile(name: string, available: boolean): { schema: string; open(): Promise<PgHandle> } {
  const schema = freshSchema(name);
  let handle: PgHandle | undefined;
  afterAll(async () => {
    await handle?.close();
    if (available) await dropSchema(schema);
  });
  return { schema, open: async () => (handle = await openPostgres(PG_TEST_URL, { schema, max: 1 })) };
}
