/**
 * What the realtime relay needs from other libraries, stated as the narrow shapes it calls. The composition
 * root passes the real services; they satisfy these structurally, so this lib does not depend on how they are built.
 */
import type { ChannelRecord } from '@gw/channels';
import type { UsageLimits, UsageLogInput } from '@gw/billing';
import type { RealtimePrice } from './usage';

/** The fields of an API key record the relay reads (@gw/identity ApiKeyRecord). */
export interface RealtimeKey {
  id: number;
  userId: number;
  status: number;
  expiresAt: number | null;
  unlimitedQuota: boolean;
  remainQuota: number;
  /** The models the key may use (null or empty: any); read again on each client event (the session's and its transcription's model). */
  models?: string[] | null;
}

export interface KeyLookup<K extends RealtimeKey = RealtimeKey> {
  lookup(plainKey: string): K | undefined;
  /** The same record by id, without hashing the key (read on every client event); absent: lookup() is used. */
  byId?(keyId: number): K | undefined;
}

/**
 * The key policy shared with /v1/messages (@gw/relay RelayGate.authorize): status, expiry and owner
 * (401), model and IP allow-lists (403). Throws a GatewayError; returns the routing group and its
 * price ratio (per-mille; absent = 1000).
 */
export interface KeyPolicy<K extends RealtimeKey = RealtimeKey> {
  authorize(key: K, model: string, ip: string): { group: string; ratio?: number };
}

/** The channel fields the relay reads (one source of truth: @gw/channels' ChannelRecord). */
export type RealtimeChannel = Pick<ChannelRecord, 'id' | 'type' | 'baseUrl' | 'apiKey' | 'models' | 'modelMapping' | 'groups' | 'priority' | 'weight' | 'headers'>
  & Partial<Pick<ChannelRecord, 'billingModel'>>
  // Every key of the channel, scrubbed from upstream text as well as the one in use (an upstream may echo a sibling).
  & { keys?: ReadonlyArray<{ apiKey: string }> };

export interface ChannelSource<C extends RealtimeChannel = RealtimeChannel> {
  /** Enabled channels serving `model` to `group`, best first. */
  candidates(model: string, group: string): C[];
  /** Every channel, enabled or not: tells 503 (none healthy) from 404 (nobody serves the model). */
  all(): C[];
}

export interface PriceSource {
  get(model: string): RealtimePrice | undefined;
}

/**
 * One usage record (a realtime response) as handed to settle: @gw/billing's UsageLogInput, with the
 * price left opaque so this lib does not depend on the price row's shape.
 */
export type RealtimeUsageLog = Omit<UsageLogInput, 'price'> & { price?: unknown };

/**
 * @gw/billing QuotaService, as the relay uses it. Each call may answer now (SQLite) or with a promise
 * (PostgreSQL: holds across nodes, settlement by group commit); the relay handles both forms.
 */
export interface QuotaPort<K, R> {
  /**
   * Throws (or rejects with) a 402 GatewayError when the user or key cannot cover `amount`. `limits` bound
   * what a settlement may bill.
   */
  reserve(input: { userId: number; apiKey: K; amount: number; ref: string; limits?: UsageLimits }): R | Promise<R>;
  /**
   * Whether the user and key could cover `amount` now, holding nothing afterwards (a session's admission):
   * throws (or rejects with) the same 402 as reserve().
   */
  affords(input: { userId: number; apiKey: K; amount: number; ref: string }): void | Promise<void>;
  /** What the user can still reserve now (balance minus pending and held). */
  available(userId: number): number;
  /** What the user can still spend now, on every node's count when there are several (a promise then); absent: available(). */
  userAvailable?(userId: number): number | Promise<number>;
  /** What a limited key of `userId` can still spend now (Infinity when unlimited); absent: only the user's balance ends a session. */
  keyAvailable?(key: K, userId: number): number | Promise<number>;
  /**
   * What the tightest budget of the key and its owner can still admit (Infinity: none applies), on every node's count
   * when there are several (a promise then); absent: budgets end no session.
   */
  budgetLeft?(userId: number, keyId: number): number | Promise<number>;
  /**
   * Writes the usage row and the charge once; `r` null = nothing was reserved. A promise = the commit
   * (its cost already counts as pending in available()); throws or rejects when the write failed.
   */
  settleNow(r: R | null, log: RealtimeUsageLog): { cost: number } | Promise<{ cost: number }>;
  release(r: R): void;
  /**
   * Keeps what a running response would be billed if the process died now (`log`, its estimate so far), until
   * settleNow() settles the same request id (@gw/billing QuotaService.checkpoint): SQLite bills what is left at the
   * next start, PostgreSQL once the dead node's hold for it lapses. Absent: a response running when the process dies
   * is not billed.
   */
  checkpoint?(r: R, log: RealtimeUsageLog): void;
}

/** Where and how to open the upstream socket of a channel (libs/providers adapters, when present). */
export interface UpstreamResolver<C extends RealtimeChannel = RealtimeChannel> {
  /** True when the channel type speaks the OpenAI Realtime protocol. */
  supports(channel: C): boolean;
  url(channel: C, upstreamModel: string): string;
  headers(channel: C, upstreamModel: string): Record<string, string>;
}

/** The per-session record written when a session ends (libs/db RealtimeSessionsRepo). */
export interface SessionRecord {
  sessionId: string;
  userId: number;
  apiKeyId: number;
  channelId: number | null;
  model: string;
  startedAt: number;
  endedAt: number;
  durationMs: number;
  framesIn: number;
  framesOut: number;
  bytesIn: number;
  bytesOut: number;
  responses: number;
  cost: number;
  closeCode: number;
  closeReason: string;
}

export interface SessionSink {
  insert(row: SessionRecord): Promise<void>;
}
