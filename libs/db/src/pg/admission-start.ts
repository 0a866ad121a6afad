import type { PgSql } from './client';

/**
 * Claims the shared admission's first start on this database (migration 0013's one-row table). Returns
 * true when this call created the row, after running `whileClaimed` (with the row's `started_at`) inside the
 * same transaction: no node has ever admitted a request against this database, so no hold can have been lost,
 * and `whileClaimed` may open the admission epoch without a recovery window. A node starting at the same
 * moment waits on the row until this transaction ends; false for it and for every later start. If
 * `whileClaimed` throws, the claim rolls back with it and the next start tries again.
 */
export async function claimAdmissionStart(sql: PgSql, whileClaimed: (startedAt: number) => Promise<unknown>): Promise<boolean> {
  const startedAt = Date.now();
  return sql.begin(async (tx) => {
    const rows = await tx`insert into admission_start (id, started_at) values (1, ${startedAt}) on conflict (id) do nothing returning id`;
    if (rows.length === 0) return false;
    await whileClaimed(startedAt);
    return true;
  }) as Promise<boolean>;
}

/**
 * The claimed row's `started_at`, which with the database's and schema's names tells this database's shared
 * Redis keys from another's (see claimPrefix). A database that served before migration 0013 has 0 there, as
 * any other such database would: the first node to read it gives it the time of that read (one writer wins).
 */
export async function admissionStartedAt(sql: PgSql): Promise<number> {
  await sql`update admission_start set started_at = ${Date.now()} where id = 1 and started_at = 0`;
  const [row] = await sql<{ started_at: string }[]>`select started_at from admission_start where id = 1`;
  if (!row) throw new Error('admission_start has no row: claimAdmissionStart runs first');
  return Number(row.started_at);
}
