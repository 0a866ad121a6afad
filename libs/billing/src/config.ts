import { readBoolEnv, readIntEnv } from '@gw/config';

export interface BillingConfig {
  /**
   * BILLING_REQUIRE_PRICE (default true): a model without a price is refused (403 model_not_priced)
   * instead of being served for free, so a misconfigured gateway never gives usage away.
   */
  requirePrice: boolean;
  /**
   * BILLING_MIN_RESERVE (default 1): the smallest reservation, so a zero-price estimate still needs a
   * non-negative balance to start.
   */
  minReserve: number;
  /**
   * BILLING_FLUSH_MS (default 5): settlements are durable in the journal at once and written to the
   * database in batches at most this late; reads of logs, ledger and balances flush first.
   */
  flushMs: number;
  /**
   * BILLING_DEFAULT_CONTEXT_TOKENS (default 200000): context window of a model whose price row sets
   * none. Input the gateway cannot measure reserves this much; reported input beyond it is implausible.
   */
  defaultContextTokens: number;
  /**
   * PostgreSQL mode's group commit (PgGroupCommitter): PG_SETTLE_FLUSH_MS (default 0: an idle committer writes at once) longest wait for
   * a batch, PG_SETTLE_BATCH (default 256) rows written at once, PG_SETTLE_DEADLINE_MS (default 15000)
   * how long a batch is retried while the database is unreachable before the request's settlement fails.
   */
  pgSettle: { maxDelayMs: number; maxBatch: number; retryDeadlineMs: number };
}

/** Reads the billing settings; throws ConfigError on a bad value. */
export function billingConfig(env: Record<string, string | undefined>): BillingConfig {
  return {
    requirePrice: readBoolEnv(env, 'BILLING_REQUIRE_PRICE', true),
    minReserve: readIntEnv(env, 'BILLING_MIN_RESERVE', 1, 0, 1_000_000_000),
    flushMs: readIntEnv(env, 'BILLING_FLUSH_MS', 5, 0, 60_000),
    defaultContextTokens: readIntEnv(env, 'BILLING_DEFAULT_CONTEXT_TOKENS', 200_000, 1, 100_000_000),
    pgSettle: {
      maxDelayMs: readIntEnv(env, 'PG_SETTLE_FLUSH_MS', 0, 0, 1_000),
      maxBatch: readIntEnv(env, 'PG_SETTLE_BATCH', 256, 1, 10_000),
      retryDeadlineMs: readIntEnv(env, 'PG_SETTLE_DEADLINE_MS', 15_000, 0, 600_000),
    },
  };
}
