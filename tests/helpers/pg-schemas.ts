/**
 * Schemas for test gateways on PostgreSQL (GW_TEST_BACKEND=pg). Migrating a fresh schema costs about
 * 0.7 s, so a stopped gateway's schema is emptied (DELETE, identities restarted: ~50 ms) and handed to
 * the next gateway of the same test process instead of being dropped. Schemas left behind by test
 * processes that are gone are dropped the first time this process asks for one.
 */
import postgres from 'postgres';
import { PG_TEST_URL, freshSchema } from './postgres';

const PREFIX = 'gwe2e';
const idle: string[] = [];
let swept: Promise<void> | null = null;

const client = () => postgres(PG_TEST_URL, { max: 1, onnotice: () => {} });

async function sweepStale(): Promise<void> {
  const sql = client();
  try {
    const rows = await sql<{ s: string }[]>`select nspname as s from pg_namespace where nspname like ${PREFIX + '\\_%'}`;
    for (const { s } of rows) {
      const pid = Number(s.split('_')[1]);
      if (!Number.isInteger(pid) || pid === process.pid) continue;
      try { process.kill(pid, 0); continue; } catch { /* its process is gone */ }
      await sql`drop schema if exists ${sql(s)} cascade`;
    }
  } finally {
    await sql.end({ timeout: 1 });
  }
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
    const tables = await sql<{ t: string }[]>`select tablename as t from pg_tables where schemaname = ${schema} and tablename <> '__drizzle_migrations'`;
    const seqs = await sql<{ s: string }[]>`
      select s.relname as s from pg_class s join pg_namespace n on n.oid = s.relnamespace
       where s.relkind = 'S' and n.nspname = ${schema}`;
    const wipe = [...tables.map((x) => `delete from "${schema}"."${x.t}";`), ...seqs.filter((x) => !x.s.startsWith('__drizzle')).map((x) => `alter sequence "${schema}"."${x.s}" restart;`)].join('\n');
    await sql.begin((tx) => tx.unsafe(wipe));
    idle.push(schema);
  } catch {
    await sql`drop schema if exists ${sql(schema)} cascade`.catch(() => {});
  } finally {
    await sql.end({ timeout: 1 });
  }
}
