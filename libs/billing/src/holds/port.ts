import { safeCount } from '@gw/core';

/**
 * Quota admission as a port. The ledger (SQLite or PostgreSQL) is the truth; a HoldStore keeps a
 * mirror of each balance plus the holds of requests in flight, and admits a request only while
 * `balance − held ≥ amount` for the user and, for a limited key, for the key. In-process
 * (`MemoryHoldStore`, one node) and Redis (`RedisHoldStore`, every node) run one contract suite.
 *
 * Lifecycle of a hold: reserve → (renew every lease/3 while the request runs) → settle(cost) once
 * the cost is known (the hold becomes the charge, capped like today's QuotaService) → the ledger
 * commits → release(hold, mirror after the commit), which drops the hold and installs the new
 * balance in one step, so the money is never counted twice nor zero times. A hold whose lease
 * lapses (its node died) moves to limbo, still counted, until the reconciler settles it and
 * releases it with the ledger's truth.
 */

/** A balance as of a ledger version; a mirror is only ever replaced by a newer one. */
export interface Mirror {
  balance: number;
  version: number;
}

export interface Hold {
  readonly ref: string;
  readonly userId: number;
  /** A limited key's id (its remaining quota is held too), else null. */
  readonly keyId: number | null;
  /** The budgets (of the key and of its owner) the amount is also held against; absent = none. */
  readonly budgetIds?: readonly number[];
  /** What the hold counts now: the reservation, then the settled charge. */
  amount: number;
}

export interface ReserveRequest {
  userId: number;
  /** Only for keys with a quota limit; unlimited keys are not mirrored. */
  keyId?: number | null;
  amount: number;
  /** The request id: unique per request, also the ledger's idempotency key. */
  ref: string;
  leaseMs: number;
  /** The periodic budgets that apply (the key's, then its owner's), each checked like a balance. */
  budgets?: BudgetScope[];
}

/**
 * A budget as admission checks it: its limit (from the node's budget book, which follows every change)
 * and the current period. What was spent in that period is the store's mirror of the budget row.
 */
export interface BudgetScope {
  id: number;
  limit: number;
  periodKey: string;
}

/**
 * A budget's committed spend in a period. Within a period spend only grows, and period keys sort in
 * time order (YYYY-MM-DD, YYYY-MM), so (periodKey, spent) orders mirrors without a version: a mirror
 * is only ever replaced by a later period or by more spend in the same one.
 */
export interface BudgetMirror {
  id: number;
  periodKey: string;
  spent: number;
}

/** Reads budgets' committed spend for missing mirrors; a budget absent from the answer is gone (nothing spent). */
export type BudgetLoader = (ids: number[]) => Promise<BudgetMirror[]>;

/** What a commit left: the balances it read back, and the spend of the budgets it charged. */
export interface AfterCommit {
  user?: Mirror;
  key?: Mirror;
  budgets?: BudgetMirror[];
}

/** What a budget can still admit: limit − spent in the current period − held (may be negative). */
export function budgetAvailable(scope: BudgetScope, mirror: { periodKey: string; spent: number }, held: number): number {
  // A mirror from a later period than this node's clock says counts as is (the safe side).
  const spent = mirror.periodKey >= scope.periodKey ? mirror.spent : 0;
  return scope.limit - spent - held;
}

/** Whether `m` is newer than `cur` (a later period, or more spend in the same one). */
export function budgetNewer(m: { periodKey: string; spent: number }, cur: { periodKey: string; spent: number } | undefined): boolean {
  return !cur || m.periodKey > cur.periodKey || (m.periodKey === cur.periodKey && m.spent > cur.spent);
}

export type ReserveResult =
  | { ok: true; hold: Hold }
  | { ok: false; reason: 'short'; scope: 'user' | 'key'; available: number; shortBy: number }
  | { ok: false; reason: 'short'; scope: 'budget'; budgetId: number; available: number; shortBy: number }
  /** The store cannot vouch for its holds yet (Redis lost its data; nodes are re-registering). */
  | { ok: false; reason: 'unavailable'; retryAfterMs: number };

/** Reads the ledger's truth for a missing mirror; null = no such user / key (nothing to spend). */
export type MirrorLoader = (userId: number, keyId: number | null) => Promise<{ user: Mirror | null; key: Mirror | null }>;

export interface HoldTarget {
  userId: number;
  keyId?: number | null;
}

export interface HoldStore {
  /**
   * Admits and records a hold, atomically for the user and the key. A missing mirror is loaded
   * with the loader, installed if still absent or older, and the reservation retried once.
   * Refuses like QuotaService: when `amount > available` or `available ≤ 0`.
   */
  reserve(req: ReserveRequest): Promise<ReserveResult>;
  /**
   * Turns the hold into the final charge and returns it: `cost`, capped at the hold plus what the
   * user (and key, and each of the hold's budgets in `budgets`) can still spend besides, so a
   * non-negative balance stays non-negative and a budget is not passed. null
   * when the store does not know the hold (already released).
   */
  settle(hold: Hold, cost: number, budgets?: BudgetScope[]): Promise<number | null>;
  /**
   * Drops the hold (also from limbo) and, in the same step, installs the mirrors read after the
   * commit that consumed it (each only if newer, and only over an existing mirror). Idempotent. The reconciler drops limbo holds so.
   */
  release(hold: Hold, after?: AfterCommit): Promise<void>;
  /** Extends the leases; a hold the store lost (data loss) is registered again. Returns how many were. */
  renew(holds: Hold[], leaseMs: number): Promise<number>;
  /**
   * Installs a mirror if the store has none or an older one (other ledger writers, after commit).
   * `ifPresent`: only replaces an existing mirror; a missing one is left for admission to load (after a
   * data loss, through the recovery window). release() installs its mirrors the same way.
   */
  applyBalance(target: HoldTarget, mirror: Mirror, opts?: { ifPresent?: boolean }): Promise<boolean>;
  /** Installs a budget's spend over an existing, older mirror (a charge no hold's release installed). */
  applyBudget(userId: number, mirror: BudgetMirror): Promise<boolean>;
  /** A budget's mirrored spend and what holds count against it (management views); null when not mirrored. */
  budgetUsage(userId: number, budgetId: number): Promise<{ periodKey: string; spent: number; held: number } | null>;
  /** balance − held for the user and the key; null where no mirror is installed. */
  available(target: HoldTarget): Promise<{ user: number | null; key: number | null }>;
  /** Moves holds whose lease lapsed to limbo (still counted) and lists everything in limbo. */
  expired(): Promise<Hold[]>;
  /** Users that may have holds now (the reconciler checks their mirrors against the ledger). */
  holders(): Promise<number[]>;
}

/** Amounts and costs as QuotaService takes them (safeCount: whole, non-negative, at most 2^53 − 1). */
export function normalizeReserve(req: ReserveRequest): ReserveRequest {
  return { ...req, amount: safeCount(req.amount), leaseMs: Math.max(1, Math.floor(req.leaseMs) || 1) };
}

/** QuotaService's refusal rule, shared so both stores decide alike. */
export function shortfall(amount: number, available: number): number | null {
  return amount > available || available <= 0 ? Math.max(1, amount - available) : null;
}
