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
   */
  async apply(r: SettlementRow, tx: PgWriter = this.db): Promise<{ inserted: false } | { inserted: true; balance: number | undefined }> {
    // SQLite's `res.changes` is the RETURNING row count here.
    const ins = await tx.execute(sql`INSERT INTO usage_logs (request_id, kind, user_id, api_key_id, channel_id, model, upstream_model,
      stream, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, audio_input_tokens, audio_output_tokens, cost,
      latency_ms, ttft_ms, status, error_code, usage_flag, attempts, ip, created_at, cache_write_1h_tokens, long_context, "group", price_ratio)
      VALUES (${r.requestId}, ${r.kind}, ${r.userId}, ${r.apiKeyId}, ${r.channelId}, ${r.model}, ${r.upstreamModel}, ${r.stream},
        ${r.inputTokens}, ${r.outputTokens}, ${r.cacheReadTokens}, ${r.cacheWriteTokens}, ${r.audioInputTokens}, ${r.audioOutputTokens},
        ${r.cost}, ${r.latencyMs}, ${r.ttftMs}, ${r.status}, ${r.errorCode}, ${r.usageFlag ?? ''}, ${r.attempts}, ${r.ip}, ${r.createdAt},
        ${r.cacheWrite1hTokens ?? 0}, ${r.longContext ?? false}, ${r.group ?? ''}, ${r.priceRatio ?? 1000})
      ON CONFLICT (request_id) DO NOTHING RETURNING 1`);
    if (ins.length === 0) return { inserted: false };
    const succeeded = r.status < 400 ? 1 : 0;
    if (r.cost <= 0) {
      if (succeeded) await tx.execute(sql`UPDATE users SET request_count = request_count + 1 WHERE id = ${r.userId}`);
      await this.chargeKey(tx, r.apiKeyId, 0, r.createdAt);
      return { inserted: true, balance: undefined };
    }
    const [u] = await tx.execute<{ quota: string | number }>(sql`UPDATE users SET quota = quota - ${r.cost}, used_quota = used_quota + ${r.cost},
      request_count = request_count + ${succeeded}, updated_at = ${r.createdAt} WHERE id = ${r.userId} RETURNING quota`);
    if (!u) throw new Error(`ledger: no user ${r.userId}`);
    // Raw statements bypass the column mapping: bigint arrives as a string.
    const balance = Number(u.quota);
    // (kind, ref) is unique in the ledger: a second charge for the same request fails the transaction.
    await tx.execute(sql`INSERT INTO ledger (user_id, kind, amount, balance_after, ref, note, created_at)
      VALUES (${r.userId}, 'charge', ${-r.cost}, ${balance}, ${r.requestId}, ${r.model}, ${r.createdAt})`);
    await this.chargeKey(tx, r.apiKeyId, r.cost, r.createdAt);
    return { inserted: true, balance };
  }

  /** Also the key's last use (SQLite's scalar max() is greatest() here); remain_quota moves for limited keys only. */
  private async chargeKey(tx: PgWriter, keyId: number, cost: number, at: number): Promise<void> {
    await tx.execute(sql`UPDATE api_keys SET used_quota = used_quota + ${cost},
      remain_quota = CASE WHEN unlimited_quota THEN remain_quota ELSE remain_quota - ${cost} END,
      last_used_at = greatest(coalesce(last_used_at, 0), ${at}) WHERE id = ${keyId}`);
  }
}
