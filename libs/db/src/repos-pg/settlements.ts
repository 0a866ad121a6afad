import { sql } from 'drizzle-orm';
import type { PgDb } from '../pg/client';
import type { BalanceMirror, SettleOutcome, SettlementRow } from '../repos/settlements';
import type { PgWriter } from './sql';
import { MAX_COUNTER } from '@gw/core';

/** Counters (used_quota, request_count) stop at 2^53 − 1: past it a reader would round them (README: Metering invariants). */
const COUNTER_CAP = sql.raw(String(MAX_COUNTER));

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
  async apply(r: SettlementRow, tx: Pick<PgWriter, 'execute'> = this.db): Promise<SettleOutcome> {
    const charged = r.cost > 0;
    const cost = charged ? r.cost : 0;
    const ok = r.status < 400 ? 1 : 0;
    const [res] = await tx.execute<{ inserted: boolean; quota: string | null; ver: string | null; remain: string | null; rver: string | null; unlimited: boolean | null }>(sql`
      WITH ins AS (
        INSERT INTO usage_logs (request_id, kind, user_id, api_key_id, channel_id, model, upstream_model, stream, input_tokens,
          output_tokens, cache_read_tokens, cache_write_tokens, audio_input_tokens, audio_output_tokens, cost, latency_ms, ttft_ms,
          status, error_code, usage_flag, attempts, ip, created_at, cache_write_1h_tokens, long_context, "group", price_ratio,
          billed_model, overrides, web_search_requests, code_execution_requests)
        VALUES (${r.requestId}, ${r.kind}, ${r.userId}, ${r.apiKeyId}, ${r.channelId}, ${r.model}, ${r.upstreamModel}, ${r.stream},
          ${r.inputTokens}, ${r.outputTokens}, ${r.cacheReadTokens}, ${r.cacheWriteTokens}, ${r.audioInputTokens}, ${r.audioOutputTokens},
          ${r.cost}, ${r.latencyMs}, ${r.ttftMs}, ${r.status}, ${r.errorCode}, ${r.usageFlag ?? ''}, ${r.attempts}, ${r.ip}, ${r.createdAt},
          ${r.cacheWrite1hTokens ?? 0}, ${r.longContext ?? false}, ${r.group ?? ''}, ${r.priceRatio ?? 1000},
          ${r.billedModel ?? ''}, ${r.overrides ?? ''}, ${r.webSearchRequests ?? 0}, ${r.codeExecutionRequests ?? 0})
        ON CONFLICT (request_id) DO NOTHING RETURNING 1
      ), u AS (
        UPDATE users SET quota = quota - ${cost}, used_quota = least(used_quota + ${cost}, ${COUNTER_CAP}), request_count = least(request_count + ${ok}, ${COUNTER_CAP}),
          updated_at = CASE WHEN ${charged} THEN ${r.createdAt} ELSE updated_at END
        WHERE id = ${r.userId} AND (${charged} OR ${ok} = 1) AND EXISTS (SELECT 1 FROM ins)
        RETURNING quota, balance_version
      ), l AS (
        -- (kind, ref) is unique in the ledger: a second charge for the same request fails the transaction.
        -- A charge whose user row is missing gets a NULL balance_after (NOT NULL): the statement fails and
        -- its usage row goes with it, also when it runs alone, autocommitted, outside a transaction.
        INSERT INTO ledger (user_id, kind, amount, balance_after, ref, note, created_at)
        SELECT ${r.userId}, 'charge', ${-cost}, u.quota, ${r.requestId}, ${r.model}, ${r.createdAt}
        FROM (SELECT 1) one LEFT JOIN u ON true WHERE ${charged} AND EXISTS (SELECT 1 FROM ins)
      ), k AS (
        -- Also the key's last use (SQLite's scalar max() is greatest() here); remain_quota moves for limited keys only.
        UPDATE api_keys SET used_quota = least(used_quota + ${cost}, ${COUNTER_CAP}),
          remain_quota = CASE WHEN unlimited_quota THEN remain_quota ELSE remain_quota - ${cost} END,
          last_used_at = greatest(coalesce(last_used_at, 0), ${r.createdAt})
        WHERE id = ${r.apiKeyId} AND EXISTS (SELECT 1 FROM ins)
        RETURNING remain_quota, remain_version, unlimited_quota
      )
      SELECT EXISTS (SELECT 1 FROM ins) AS inserted, (SELECT quota FROM u) AS quota, (SELECT balance_version FROM u) AS ver,
        (SELECT remain_quota FROM k) AS remain, (SELECT remain_version FROM k) AS rver, (SELECT unlimited_quota FROM k) AS unlimited`).catch(noUserAsError(r.userId));
    if (!res!.inserted) return { inserted: false };
    const mirror = mirrorsOf(res!.quota, res!.ver, res!.remain, res!.rver, res!.unlimited);
    if (!charged) return { inserted: true, balance: undefined, mirror };
    // The statement failed above for a charge without a user row (ledger NOT NULL): unreachable with a row written.
    if (res!.quota === null) throw new Error(`ledger: no user ${r.userId}`);
    // A raw statement bypasses the column mapping: bigint arrives as a string.
    return { inserted: true, balance: Number(res!.quota), mirror };
  }

  /**
   * Writes a batch of settlements in one statement (the group commit's shape): `rows` in the order
   * their charges apply, the caller's transaction. The same writes as apply() per row, but the usage
   * rows go in with one INSERT, each user and each key is updated once with its batch's sum, and each
   * ledger row's balance_after is the user's final balance plus the charges after it. A request id
   * repeated in the batch or already stored inserts nothing (the first occurrence wins). Users and keys
   * are locked first in id order, so concurrent batches (other nodes) cannot deadlock.
   * Fails (the statement itself, so the caller's transaction) when a charged row has no user, as apply() does.
   */
  async applyMany(rows: SettlementRow[], tx: Pick<PgWriter, 'execute'>): Promise<SettleOutcome[]> {
    if (!rows.length) return [];
    const payload = JSON.stringify(rows.map((r, ord) => ({
      ord, request_id: r.requestId, kind: r.kind, user_id: r.userId, api_key_id: r.apiKeyId, channel_id: r.channelId, model: r.model,
      upstream_model: r.upstreamModel, stream: r.stream, input_tokens: r.inputTokens, output_tokens: r.outputTokens,
      cache_read_tokens: r.cacheReadTokens, cache_write_tokens: r.cacheWriteTokens, audio_input_tokens: r.audioInputTokens,
      audio_output_tokens: r.audioOutputTokens, cost: r.cost, latency_ms: r.latencyMs, ttft_ms: r.ttftMs, status: r.status,
      error_code: r.errorCode, usage_flag: r.usageFlag ?? '', attempts: r.attempts, ip: r.ip, created_at: r.createdAt,
      cache_write_1h_tokens: r.cacheWrite1hTokens ?? 0, long_context: r.longContext ?? false, group: r.group ?? '',
      price_ratio: r.priceRatio ?? 1000, billed_model: r.billedModel ?? '', overrides: r.overrides ?? '',
      web_search_requests: r.webSearchRequests ?? 0, code_execution_requests: r.codeExecutionRequests ?? 0,
    })));
    const userIds = [...new Set(rows.map((r) => r.userId))].sort((a, b) => a - b);
    const keyIds = [...new Set(rows.map((r) => r.apiKeyId))].sort((a, b) => a - b);
    const lockUsers = tx.execute(sql`SELECT 1 FROM users WHERE id IN (SELECT unnest(${`{${userIds.join(',')}}`}::bigint[])) ORDER BY id FOR UPDATE`);
    const lockKeys = tx.execute(sql`SELECT 1 FROM api_keys WHERE id IN (SELECT unnest(${`{${keyIds.join(',')}}`}::bigint[])) ORDER BY id FOR UPDATE`);
    const write = tx.execute<{ ord: number; cost: string; balance_after: string | null; quota: string | null; ver: string | null;
      remain: string | null; rver: string | null; unlimited: boolean | null }>(sql`
      WITH input AS (
        SELECT DISTINCT ON (t.request_id) t.* FROM jsonb_to_recordset(${payload}::jsonb) AS t(ord int, request_id text, kind text,
          user_id bigint, api_key_id bigint, channel_id bigint, model text, upstream_model text, stream boolean, input_tokens bigint,
          output_tokens bigint, cache_read_tokens bigint, cache_write_tokens bigint, audio_input_tokens bigint, audio_output_tokens bigint,
          cost bigint, latency_ms bigint, ttft_ms bigint, status int, error_code text, usage_flag text, attempts int, ip text,
          created_at bigint, cache_write_1h_tokens bigint, long_context boolean, "group" text, price_ratio int, billed_model text, overrides text,
          web_search_requests bigint, code_execution_requests bigint)
        ORDER BY t.request_id, t.ord
      ), ins AS (
        INSERT INTO usage_logs (request_id, kind, user_id, api_key_id, channel_id, model, upstream_model, stream, input_tokens,
          output_tokens, cache_read_tokens, cache_write_tokens, audio_input_tokens, audio_output_tokens, cost, latency_ms, ttft_ms,
          status, error_code, usage_flag, attempts, ip, created_at, cache_write_1h_tokens, long_context, "group", price_ratio,
          billed_model, overrides, web_search_requests, code_execution_requests)
        SELECT request_id, kind, user_id, api_key_id, channel_id, model, upstream_model, stream, input_tokens,
          output_tokens, cache_read_tokens, cache_write_tokens, audio_input_tokens, audio_output_tokens, cost, latency_ms, ttft_ms,
          status, error_code, usage_flag, attempts, ip, created_at, cache_write_1h_tokens, long_context, "group", price_ratio,
          billed_model, overrides, web_search_requests, code_execution_requests
        FROM input ORDER BY ord
        ON CONFLICT (request_id) DO NOTHING RETURNING request_id
      ), new AS (
        SELECT i.* FROM input i JOIN ins USING (request_id)
      ), per_user AS (
        SELECT user_id, sum(greatest(cost, 0)) AS cost, count(*) FILTER (WHERE status < 400) AS ok,
          -- As row by row: the last charge's time, not the latest one.
          (array_agg(created_at ORDER BY ord DESC) FILTER (WHERE cost > 0))[1] AS charged_at
        FROM new GROUP BY user_id
      ), u AS (
        UPDATE users SET quota = quota - p.cost, used_quota = least(used_quota + p.cost, ${COUNTER_CAP}), request_count = least(request_count + p.ok, ${COUNTER_CAP}),
          updated_at = coalesce(p.charged_at, users.updated_at)
        FROM per_user p WHERE users.id = p.user_id AND (p.cost > 0 OR p.ok > 0)
        RETURNING users.id, users.quota, users.balance_version
      ), charges AS (
        -- The balance after each charge, in batch order: the final balance plus the charges that follow it.
        -- A charge whose user row is missing gets a NULL balance_after, which the ledger refuses (NOT NULL):
        -- the statement itself fails, so a transaction sent in one piece never writes such a batch.
        SELECT n.ord, n.user_id, n.cost, n.request_id, n.model, n.created_at,
          u.quota + coalesce(sum(n.cost) OVER (PARTITION BY n.user_id ORDER BY n.ord ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING), 0) AS balance_after
        FROM new n LEFT JOIN u ON u.id = n.user_id WHERE n.cost > 0
      ), l AS (
        INSERT INTO ledger (user_id, kind, amount, balance_after, ref, note, created_at)
        SELECT user_id, 'charge', -cost, balance_after, request_id, model, created_at FROM charges ORDER BY user_id, ord
      ), per_key AS (
        SELECT api_key_id, sum(greatest(cost, 0)) AS cost, max(created_at) AS at FROM new GROUP BY api_key_id
      ), k AS (
        UPDATE api_keys SET used_quota = least(used_quota + pk.cost, ${COUNTER_CAP}),
          remain_quota = CASE WHEN unlimited_quota THEN remain_quota ELSE remain_quota - pk.cost END,
          last_used_at = greatest(coalesce(last_used_at, 0), pk.at)
        FROM per_key pk WHERE api_keys.id = pk.api_key_id
        RETURNING api_keys.id, api_keys.remain_quota, api_keys.remain_version, api_keys.unlimited_quota
      )
      -- Each row also gets its user's and key's balances as this batch leaves them (the mirrors the
      -- shared admission store installs once the batch is durable; the word for the end of a
      -- transaction is kept out of this text, as a test cuts the connection when it sees it go out).
      SELECT n.ord, n.cost, c.balance_after, uu.quota, uu.balance_version AS ver,
        kk.remain_quota AS remain, kk.remain_version AS rver, kk.unlimited_quota AS unlimited
      FROM new n LEFT JOIN charges c ON c.ord = n.ord LEFT JOIN u uu ON uu.id = n.user_id LEFT JOIN k kk ON kk.id = n.api_key_id`);
    // Issued together: postgres.js pipelines them on the transaction's connection, in this order.
    const [, , written] = await Promise.all([lockUsers, lockKeys, write]).catch(noUserAsError(null));
    const out: SettleOutcome[] = rows.map(() => ({ inserted: false }));
    for (const w of written) {
      const cost = Number(w.cost);
      out[w.ord] = { inserted: true, balance: cost > 0 ? Number(w.balance_after) : undefined, mirror: mirrorsOf(w.quota, w.ver, w.remain, w.rver, w.unlimited) };
    }
    return out;
  }
}

/** The ledger's NOT NULL balance_after refusing a charge whose user row is missing, said as such. */
function noUserAsError(userId: number | null) {
  return (err: unknown): never => {
    const pg = (err as { cause?: unknown })?.cause ?? err;
    const e = pg as { code?: string; column_name?: string; column?: string } | null;
    if (e?.code === '23502' && (e.column_name ?? e.column) === 'balance_after') throw new Error(`ledger: no user ${userId ?? '(a row of the batch)'}`, { cause: err });
    throw err;
  };
}

/** The mirrors a settlement statement read back: the user's, and a limited key's (an unlimited key has none). */
export function mirrorsOf(quota: string | number | null, ver: string | number | null, remain: string | number | null,
  rver: string | number | null, unlimited: boolean | null): { user?: BalanceMirror; key?: BalanceMirror } {
  const out: { user?: BalanceMirror; key?: BalanceMirror } = {};
  if (quota !== null && ver !== null) out.user = { balance: Number(quota), version: Number(ver) };
  if (remain !== null && rver !== null && unlimited === false) out.key = { balance: Number(remain), version: Number(rver) };
  return out;
}
