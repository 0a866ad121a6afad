import { sql } from 'drizzle-orm';
import type { PgDb } from '../pg/client';
import type { SettlementRow } from '../repos/settlements';
import type { PgWriter } from './sql';

/**
 * PostgreSQL twin of ../repos/settlements.ts: the same writes (usage row unique by request id,
 * ledger 'charge' with ref = request id and balance_after, user and key counters) in raw SQL.
 * SQLite's version is connection-bound and joins whatever transaction is open; here the caller
 * passes its transaction (`tx`), or each statement runs on its own.
 */
export class PgSettlementsRepo {
  constructor(private readonly db: PgDb) {}

  /**
   * Writes one settlement. `{ inserted: false }` when the request id was already settled (nothing
   * written), else the user's balance after the charge (`undefined` when nothing was charged).
   *
   * One statement, so one round trip where SQLite runs four: the later parts of the CTE act only
   * when the usage row was inserted (`exists (select 1 from ins)`), and the ledger row takes its
   * balance_after from the user update's RETURNING. A concurrent settlement of the same request id
   * waits on the unique index, then inserts nothing and so changes nothing.
   */
  async apply(r: SettlementRow, tx: PgWriter = this.db): Promise<{ inserted: false } | { inserted: true; balance: number | undefined }> {
    const charged = r.cost > 0;
    const cost = charged ? r.cost : 0;
    const ok = r.status < 400 ? 1 : 0;
    const [res] = await tx.execute<{ inserted: boolean; quota: string | null }>(sql`
      WITH ins AS (
        INSERT INTO usage_logs (request_id, kind, user_id, api_key_id, channel_id, model, upstream_model, stream, input_tokens,
          output_tokens, cache_read_tokens, cache_write_tokens, audio_input_tokens, audio_output_tokens, cost, latency_ms, ttft_ms,
          status, error_code, usage_flag, attempts, ip, created_at, cache_write_1h_tokens, long_context, "group", price_ratio,
          billed_model, overrides)
        VALUES (${r.requestId}, ${r.kind}, ${r.userId}, ${r.apiKeyId}, ${r.channelId}, ${r.model}, ${r.upstreamModel}, ${r.stream},
          ${r.inputTokens}, ${r.outputTokens}, ${r.cacheReadTokens}, ${r.cacheWriteTokens}, ${r.audioInputTokens}, ${r.audioOutputTokens},
          ${r.cost}, ${r.latencyMs}, ${r.ttftMs}, ${r.status}, ${r.errorCode}, ${r.usageFlag ?? ''}, ${r.attempts}, ${r.ip}, ${r.createdAt},
          ${r.cacheWrite1hTokens ?? 0}, ${r.longContext ?? false}, ${r.group ?? ''}, ${r.priceRatio ?? 1000},
          ${r.billedModel ?? ''}, ${r.overrides ?? ''})
        ON CONFLICT (request_id) DO NOTHING RETURNING 1
      ), u AS (
        UPDATE users SET quota = quota - ${cost}, used_quota = used_quota + ${cost}, request_count = request_count + ${ok},
          updated_at = CASE WHEN ${charged} THEN ${r.createdAt} ELSE updated_at END
        WHERE id = ${r.userId} AND (${charged} OR ${ok} = 1) AND EXISTS (SELECT 1 FROM ins)
        RETURNING quota
      ), l AS (
        -- (kind, ref) is unique in the ledger: a second charge for the same request fails the transaction.
        INSERT INTO ledger (user_id, kind, amount, balance_after, ref, note, created_at)
        SELECT ${r.userId}, 'charge', ${-cost}, u.quota, ${r.requestId}, ${r.model}, ${r.createdAt} FROM u WHERE ${charged}
      ), k AS (
        -- Also the key's last use (SQLite's scalar max() is greatest() here); remain_quota moves for limited keys only.
        UPDATE api_keys SET used_quota = used_quota + ${cost},
          remain_quota = CASE WHEN unlimited_quota THEN remain_quota ELSE remain_quota - ${cost} END,
          last_used_at = greatest(coalesce(last_used_at, 0), ${r.createdAt})
        WHERE id = ${r.apiKeyId} AND EXISTS (SELECT 1 FROM ins)
      )
      SELECT EXISTS (SELECT 1 FROM ins) AS inserted, (SELECT quota FROM u) AS quota`);
    if (!res!.inserted) return { inserted: false };
    if (!charged) return { inserted: true, balance: undefined };
    // No user row: the caller's transaction must roll the usage row back, as on SQLite.
    if (res!.quota === null) throw new Error(`ledger: no user ${r.userId}`);
    // A raw statement bypasses the column mapping: bigint arrives as a string.
    return { inserted: true, balance: Number(res!.quota) };
  }
}
