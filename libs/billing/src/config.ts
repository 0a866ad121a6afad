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
   * none. Input the gateway cannot measure reserves this much; reported input beyond it (beyond one window per
   * sampling of a server-tool loop) is implausible.
   */
  defaultContextTokens: number;
  /**
   * BILLING_WEB_SEARCH_PRICE (default: QUOTA_PER_UNIT, i.e. one minor currency unit, Anthropic's $0.01 per
   * search with USD top-ups): quota units per web search for a model whose price row sets no `web_search`.
   */
  webSearchPrice: number;
  /**
   * WEB_SEARCH_MAX_USES (default 10): every web-search server tool's `max_uses` is capped at this before the
   * request is sent (a lower client value is kept, a missing one set to it), so the searches a request can
   * be billed for are known when its reservation is made.
   */
  webSearchMaxUses: number;
  /**
   * CODE_EXECUTION_MAX_CALLS (default 20): the most code-execution calls (Anthropic's code-execution server tool)
   * one request is reserved for and billed; the tool has no max_uses, so the reservation adds this many calls
   * at the price's `code_execution`, and a counted number above it is clamped (implausible).
   */
  codeExecutionMaxCalls: number;
  /**
   * PostgreSQL mode's group commit (PgGroupCommitter): PG_SETTLE_FLUSH_MS (default 0: an idle committer writes at the end of the event-loop turn, after the answers it produced have started) longest wait for
   * a batch, PG_SETTLE_BATCH (default 256) rows written at once, PG_SETTLE_DEADLINE_MS (default 15000)
   * how long a batch is retried while the database is unreachable before the request's settlement fails.
   */
  pgSettle: { maxDelayMs: number; maxBatch: number; retryDeadlineMs: number };
  /**
   * PostgreSQL mode's shared admission (Redis holds): HOLD_LEASE_MS (default 30000) how long a hold
   * counts after its node stopped renewing it (live holds are renewed every third of it);
   * HOLD_RECONCILE_MS (default 5000) how often the leader releases lapsed holds against the ledger.
   * `recoveryMs`: after Redis comes back empty, how long admissions wait (503) while every node puts its
   * live holds back: one renewal interval plus a second.
   */
  holds: { leaseMs: number; reconcileMs: number; recoveryMs: number };
}

/** Reads the billing settings; throws ConfigError on a bad value. */
export function billingConfig(env: Record<string, string | undefined>): BillingConfig {
  return {
    requirePrice: readBoolEnv(env, 'BILLING_REQUIRE_PRICE', true),
    minReserve: readIntEnv(env, 'BILLING_MIN_RESERVE', 1, 0, 1_000_000_000),
    flushMs: readIntEnv(env, 'BILLING_FLUSH_MS', 5, 0, 60_000),
    defaultContextTokens: readIntEnv(env, 'BILLING_DEFAULT_CONTEXT_TOKENS', 200_000, 1, 100_000_000),
    // QUOTA_PER_UNIT as the payments config reads it (same default and range): one minor currency unit.
    webSearchPrice: readIntEnv(env, 'BILLING_WEB_SEARCH_PRICE', readIntEnv(env, 'QUOTA_PER_UNIT', 5000, 1, 1_000_000_000), 0, 1_000_000_000_000),
    webSearchMaxUses: readIntEnv(env, 'WEB_SEARCH_MAX_USES', 10, 1, 1000),
    codeExecutionMaxCalls: readIntEnv(env, 'CODE_EXECUTION_MAX_CALLS', 20, 1, 1000),
    pgSettle: {
      maxDelayMs: readIntEnv(env, 'PG_SETTLE_FLUSH_MS', 0, 0, 1_000),
      maxBatch: readIntEnv(env, 'PG_SETTLE_BATCH', 256, 1, 10_000),
      retryDeadlineMs: readIntEnv(env, 'PG_SETTLE_DEADLINE_MS', 15_000, 0, 600_000),
    },
    holds: holdsConfig(env),
  };
}

function holdsConfig(env: Record<string, string | undefined>): BillingConfig['holds'] {
  const leaseMs = readIntEnv(env, 'HOLD_LEASE_MS', 30_000, 3_000, 600_000);
  return { leaseMs, reconcileMs: readIntEnv(env, 'HOLD_RECONCILE_MS', 5_000, 200, 60_000), recoveryMs: Math.ceil(leaseMs / 3) + 1_000 };
}
