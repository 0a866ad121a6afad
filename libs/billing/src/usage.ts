import type { PriceRow } from '@gw/db';
import { priceUsage, type BillablePrice } from './tiers';
import type { UsageLimits } from './usage-guard';
import type { BudgetHold } from './budgets/book';
import type { Hold } from './holds/port';

/** The parts of a relay API key the quota needs (structurally an @gw/identity ApiKeyRecord). */
export interface QuotaKey {
  id: number;
  unlimitedQuota: boolean;
  remainQuota: number;
}

/** Money held for one in-flight request; released exactly once (by settle or release). */
export interface Reservation {
  readonly ref: string;
  readonly userId: number;
  readonly keyId: number;
  readonly keyLimited: boolean;
  readonly amount: number;
  /** What the request can plausibly use (set by the caller that sized the reservation). */
  readonly limits?: UsageLimits;
  /** The budgets of the key and its owner this request holds against; absent = none applied. */
  readonly budget?: BudgetHold | null;
  /** PostgreSQL mode: the hold in the shared store (Redis) that admitted this request; absent = held in this process. */
  readonly hold?: Hold;
  done: boolean;
}

/** Token counts by kind, as the upstream reported them. */
export interface TokenUsage {
  input: number;
  output: number;
  cacheRead: number;
  /** Every prompt-cache write, whatever its TTL. */
  cacheWrite: number;
  /** The part of `cacheWrite` written with the 1-hour TTL (billed at `cache_write_1h`); absent = none. */
  cacheWrite1h?: number;
  audioInput?: number;
  audioOutput?: number;
  /** Web searches (Anthropic's usage.server_tool_use.web_search_requests), billed per search; absent = none. */
  webSearch?: number;
  /**
   * Code-execution calls (server_tool_use blocks named code_execution, bash_code_execution or text_editor_code_execution,
   * counted by the gateway in the answer: the usage object has no count), billed per call; absent = none.
   */
  codeExecution?: number;
}

/** Usage as an upstream reported it: any field may be missing or hostile until guardUsage has seen it. */
export type UsageReport = Partial<Record<keyof TokenUsage, unknown>>;

/** Everything a usage log row records; `cost` is computed by settle from `usage` and the price. */
export interface UsageLogInput {
  requestId: string;
  kind?: 'messages' | 'realtime';
  userId: number;
  apiKeyId: number;
  /**
   * For a charge without a reservation (a realtime transcription, a response whose hold was refused): the key is
   * limited, so its remain_quota caps the charge as it caps a reserved one. Absent: the reservation says.
   */
  keyLimited?: boolean;
  /** With keyLimited: the key record's remain_quota as the caller reads it now (an operator may have changed it). */
  keyRemain?: number;
  channelId: number | null;
  model: string;
  upstreamModel: string;
  stream: boolean;
  /** As reported (validated at settle time); null = the upstream reported none. */
  usage: UsageReport | null;
  /** Per-field fallback for missing or unusable counts (e.g. the estimate of what was delivered). */
  estimate?: Partial<TokenUsage>;
  /** `usage` is itself the gateway's estimate, not the upstream's report. */
  estimated?: boolean;
  /** Plausibility limits; they win over the reservation's (a request sized for several channels settles with the serving one's). */
  limits?: UsageLimits;
  /**
   * The price the request was admitted (and held) at; null = admitted without one (free). Absent: the PriceBook's
   * current price of `billedModel`, else of `model` (zero when unpriced).
   */
  price?: PriceRow | null;
  /** The model whose price applies when it is not `model` (a channel billing the upstream model); recorded on the row. */
  billedModel?: string;
  /** JSON list of the channel overrides that changed the request ('' or absent = none). */
  overrides?: string;
  latencyMs: number;
  ttftMs: number | null;
  status: number;
  errorCode: string;
  attempts: number;
  ip: string;
  /** The requesting group and its price ratio (per-mille; default 1000) applied to the cost. */
  group?: string;
  ratio?: number;
}

/**
 * Exact cost in quota units of `u` at `p` (its cache-write TTLs and long-context tier applied, searches at
 * `searchPrice` each, default the row's own `web_search` or 0; rounded up once over all kinds); never throws, whatever the counts.
 */
export function costFor(u: TokenUsage, p: BillablePrice | undefined, searchPrice?: number): number {
  return priceUsage(u, p, undefined, searchPrice).cost;
}

/** The outcome of settling one request. */
export interface Settlement {
  /** Quota units charged (0 when already settled). */
  cost: number;
  /** This request id had been settled before: nothing was written. */
  duplicate: boolean;
}

