/**
 * Schemas for test gateways on PostgreSQL (GW_TEST_BACKEND=pg). Migrating a fresh schema costs about
 * 0.7 s, so a stopped gateway's schema is emptied (DELETE, identities restarted: ~50 ms) and handed to
 * the next gateway of the same test process instead of being dropped. Schemas left behind by test
 * processes that are gone are dropped the first time this process asks for one, and by
 * scripts/sweep-test-data.ts after a run (CI).
 */
import postgres from 'postgres';
import { PG_TEST_URL, freshSchema } from './postgres';

const PREFIX = 'gwe2e';
const idle: string[] = [];
let swept: Promise<void> | null = null;

const client = (url = PG_TEST_URL) => postgres(url, { max: 1, onnotice: () => {} });

/** Every test schema is named <prefix>_<pid>_<random> (freshSchema), and every prefix starts with "gw". */
const TEST_SCHEMA = /^gw[a-z0-9_]*?_(\d+)_[a-z0-9]{1,8}$/;

const alive = (pid: number) => {
  try { process.kill(pid, 0); return true; } catch (e) { return (e as { code?: string }).code === 'EPERM'; }
};

/**
 * Drops the test schemas of test processes that are gone (any test file's, not only gateways'): a run
 * that ended, crashed or was killed leaves its schemas behind, and repeated runs must not fill the
 * database. A live process's schemas are never touched. Returns the names dropped.
 */
export async function dropStaleSchemas(url = PG_TEST_URL): Promise<string[]> {
  const sql = client(url);
  const dropped: string[] = [];
  try {
    const rows = await sql<{ s: string }[]>`select nspname as s from pg_namespace where nspname like 'gw%'`;
    for (const { s } of rows) {
      const m = TEST_SCHEMA.exec(s);
      const pid = m ? Number(m[1]) : NaN;
      if (!Number.isInteger(pid) || pid === process.pid || alive(pid)) continue;
      await sql`drop schema if exists ${sql(s)} cascade`;
      dropped.push(s);
    }
  } finally {
    await sql.end({ timeout: 1 });
  }
  return dropped;
}

async function sweepStale(): Promise<void> {
  await dropStaleSchemas();
}

/** A schema for one gateway: an emptied one of this process, else a new name (the gateway migrates it). */
export async function takeSchema(): Promise<string> {
  swept ??= sweepStale().catch(() => {});
  await swept;
  return idle.pop() ?? freshSchema(PREFIX);
}

/** Empties the schema of a stopped gateway and keeps it for the next one. */
export async function returnSchema(schema: string): Promise<void> {
  const sql = client();
  try {
    // A DELETE leaves the table's pages behind (dead rows until a vacuum): a test that seeded 200k usage rows
    // handed the next gateway a 54 MB usage_logs that every scan still read (a filter without an index took
    // 57-83 ms on an empty table). Such tables are truncated instead (new, empty files; ~30 ms, so not all).
    const tables = await sql<{ t: string; big: boolean }[]>`
      select tablename as t, pg_total_relation_size(format('%I.%I', schemaname, tablename)::regclass) > 1048576 as big
        from pg_tables where schemaname = ${schema} and tablename <> '__drizzle_migrations'`;
    const big = tables.filter((x) => x.big).map((x) => `"${schema}"."${x.t}"`);
    const seqs = await sql<{ s: string }[]>`
      select s.relname as s from pg_class s join pg_namespace n on n.oid = s.relnamespace
       where s.relkind = 'S' and n.nspname = ${schema}`;
    const wipe = [...(big.length ? [`truncate ${big.join(', ')} cascade;`] : []), ...tables.filter((x) => !x.big).map((x) => `delete from "${schema}"."${x.t}";`), ...seqs.filter((x) => !x.s.startsWith('__drizzle')).map((x) => `alter sequence "${schema}"."${x.s}" restart;`)].join('\n');
    await sql.begin((tx) => tx.unsafe(wipe));
    idle.push(schema);
  } catch {
    await sql`drop schema if exists ${sql(schema)} cascade`.catch(() => {});
  } finally {
    await sql.end({ timeout: 1 });
  }
}
