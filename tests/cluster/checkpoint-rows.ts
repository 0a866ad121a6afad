/** Shared by the tests of the leader's checkpoint billing: a dead node's checkpoint row, and one user's books. */
import type { SettlementRow } from '@gw/db';
import type { PgSql } from '@gw/db/pg';

/** A realtime checkpoint as a dead node left it (billed as `gateway_crashed`, `estimated`). */
export const checkpointRow = (requestId: string, userId: number, apiKeyId: number, cost: number): SettlementRow => ({
  requestId, kind: 'realtime', userId, apiKeyId, channelId: null, model: 'm', upstreamModel: 'm', stream: true, inputTokens: 1, outputTokens: 1,
  cacheReadTokens: 0, cacheWriteTokens: 0, cacheWrite1hTokens: 0, longContext: false, audioInputTokens: 0, audioOutputTokens: 0, webSearchRequests: 0,
  codeExecutionRequests: 0, cost, latencyMs: 0, ttftMs: null, status: 200, errorCode: 'gateway_crashed', usageFlag: 'estimated', attempts: 1, ip: '',
  createdAt: 1, group: '', priceRatio: 1000, billedModel: '', overrides: '',
});

/** The books of one user: what the ledger charged, how many charges, the usage rows' cost, the balance. */
export async function ledgerBooks(sql: PgSql, userId: number) {
  const [b] = await sql<{ quota: string; charged: string; charges: string; usage: string }[]>`
    select u.quota,
      (select coalesce(sum(amount), 0) from ledger l where l.user_id = u.id) as charged,
      (select count(*) from ledger l where l.user_id = u.id and l.kind = 'charge') as charges,
      (select coalesce(sum(cost), 0) from usage_logs g where g.user_id = u.id) as usage
    from users u where u.id = ${userId}`;
  return { quota: Number(b!.quota), charged: -Number(b!.charged), charges: Number(b!.charges), usage: Number(b!.usage) };
}
