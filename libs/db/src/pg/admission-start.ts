import type { PgSql } from './client';

/**
 * Claims the shared admission's first start on this database (migration 0013's one-row table). Returns
 * true when this call created the row, after running `whileClaimed` inside the same transaction: no node
 * has ever admitted a request against this database, so no hold can have been lost, and `whileClaimed`
 * may open the admission epoch without a recovery window. A node starting at the same moment waits on the
 * row until this transaction ends; false for it and for every later start. If `whileClaimed` throws, the
 * claim rolls back with it and the next start tries again.
 */
export async function claimAdmissionStart(sql: PgSql, whileClaimed: () => Promise<unknown>): Promise<boolean> {
  return sql.begin(async (tx) => {
    const rows = await tx`insert into admission_start (id, started_at) values (1, ${Date.now()}) on conflict (id) do nothing returning id`;
    if (rows.length === 0) return false;
    await whileClaimed();
    return true;
  }) as Promise<boolean>;
}
