import { causeChain, errorText, everyWhileLeader, type Leader, type Logger } from '@gw/core';
import type { SettlementRow } from '@gw/db';
import { withFlag } from '../usage-guard';
import type { BudgetMirror, Hold, HoldStore, Mirror } from './port';
import { refreshHolderMirrors } from './refresh-mirrors';

/** What the reconciler asks the ledger (PostgreSQL): was a request settled, and what are the balances now. */
export interface LedgerTruth {
  settled(requestId: string): Promise<boolean>;
  mirrors(userId: number, keyId: number | null): Promise<{ user: Mirror | null; key: Mirror | null }>;
  /** These users' balances and those of their limited keys, as committed now (absent users left out). */
  accounts(userIds: number[]): Promise<Array<{ userId: number; user: Mirror; keys: Array<{ keyId: number; mirror: Mirror }> }>>;
  /** Budgets' committed spend (a hold on budgets is released with it, as with balances). */
  budgetSpend?(ids: number[]): Promise<BudgetMirror[]>;
}

/**
 * The checkpoints of realtime responses running on a node (PostgreSQL realtime_unfinished: each one's settlement as
 * it would be billed if the node died now, kept under its hold's ref) and the settlement path that bills them.
 */
export interface UnfinishedBilling {
  rows: {
    heldBy(holdRef: string): Promise<Array<{ requestId: string; row: SettlementRow | null }>>;
    remove(requestId: string): Promise<void>;
    /** What the ledger already charged for these request ids (their usage rows' cost; 0 for ids never settled). */
    settledCost(requestIds: string[]): Promise<number>;
    sweepSettled(): Promise<number>;
    /** Runs `fn` while no other node works on this hold (null without running it): a hold is billed and released once. */
    claim?<T>(holdRef: string, fn: () => Promise<T>): Promise<{ value: T } | null>;
  };
  /** Writes one settlement, unique by request id (the group commit): usage row, ledger charge, counters, budgets. */
  settle(row: SettlementRow): Promise<{ inserted: boolean }>;
}

/**
 * PostgreSQL refused the row itself (class 22, data exception: a value out of range; class 23, integrity: its user
 * or key gone): writing it again cannot succeed, so it is logged and deleted and its hold released. Anything else
 * (the database unreachable, the settlement path closing under a shutdown, an unknown failure) keeps the row and
 * its hold in limbo for the next pass: deleting it there would lose the charge for good.
 */
function rowRefused(err: unknown): boolean {
  return causeChain(err).some((e) => e.name === 'PostgresError' && typeof e.code === 'string' && /^2[23]/.test(e.code));
}

/**
 * Releases holds whose node stopped renewing them (it died, or lost Redis long enough): run by the
 * leader only. A lapsed hold sits in limbo, still counted, so nothing is overspent meanwhile. Its
 * node either committed the charge before dying (the ledger has the request id) or never will (its
 * process is gone, and a settlement is only written by the process that served the request): either
 * way the hold is released with the ledger's balances as they are now, which include that charge if
 * it happened. Its running realtime responses and `/v1/messages` streams past their first second are billed from
 * their checkpoints (`unfinished`) before their holds are released; its other unfinished requests are not (nothing
 * recorded what they delivered).
 */
export class HoldReconciler {
  private running: Promise<number> | null = null;

  constructor(private readonly store: HoldStore, private readonly ledger: LedgerTruth,
    private readonly opts: { intervalMs: number; log?: Logger; unfinished?: UnfinishedBilling }) {}

  /** One pass: every hold in limbo released against the ledger. Returns how many were released. */
  async runOnce(signal?: AbortSignal): Promise<number> {
    // Passes never overlap (a slow database must not stack them).
    this.running ??= this.pass(signal).finally(() => { this.running = null; });
    return this.running;
  }

  /**
   * Runs a pass every `intervalMs` while `leader` leads, and one at once when it takes over (a killed leader's own
   * holds may have lapsed while no node led); the stop function resolves once a running pass ended.
   */
  follow(leader: Leader): () => Promise<void> {
    return everyWhileLeader(leader, this.opts.intervalMs, (signal) => this.runOnce(signal), { atOnce: true });
  }

  /**
   * A pass stops between two holds once `signal` says this node lost leadership (or is stopping): the next
   * leader's pass takes the rest, rather than both working through the same holds at once.
   */
  private async pass(signal?: AbortSignal): Promise<number> {
    let limbo: Hold[];
    try {
      limbo = await this.store.expired();
    } catch (err) {
      this.opts.log?.warn('hold.reconcile_failed', { cause: errorText(err) });
      return 0;
    }
    let released = 0;
    for (const hold of limbo) {
      if (signal?.aborted) return released;
      try {
        const done = await this.claimed(hold, () => this.reconcile(hold));
        if (done) released++;
        else this.opts.log?.info('hold.reconcile_skipped', { id: hold.ref, msg: 'another node is reconciling this hold (leadership hand-over)' });
      } catch (err) {
        // Stays in limbo (still counted) until the next pass.
        this.opts.log?.warn('hold.reconcile_failed', { id: hold.ref, cause: errorText(err) });
      }
    }
    if (signal?.aborted) return released;
    await this.sweepUnfinished();
    await this.refreshMirrors();
    return released;
  }

  /** Runs `fn` under the hold's claim when the checkpoints have one (PostgreSQL); null when another node has it. */
  private async claimed(hold: Hold, fn: () => Promise<void>): Promise<boolean> {
    const claim = this.opts.unfinished?.rows.claim;
    if (!claim) {
      await fn();
      return true;
    }
    return (await claim.call(this.opts.unfinished!.rows, hold.ref, fn)) !== null;
  }

  /** Bills a lapsed hold's checkpoints, then releases it with the ledger's balances. */
  private async reconcile(hold: Hold): Promise<void> {
    // Before the release: the balances it installs are read after these charges committed.
    const billed = await this.billUnfinished(hold);
    const charged = billed || await this.ledger.settled(hold.ref);
    const m = await this.ledger.mirrors(hold.userId, hold.keyId);
    // Read after the settled check, like the balances: a charge committed before it is in this spend.
    const budgets = hold.budgetIds?.length && this.ledger.budgetSpend ? await this.ledger.budgetSpend([...hold.budgetIds]) : undefined;
    await this.store.release(hold, { user: m.user ?? undefined, key: m.key ?? undefined, budgets });
    this.opts.log?.info('hold.reconciled', { id: hold.ref, userId: hold.userId, keyId: hold.keyId ?? '', amount: hold.amount, outcome: charged ? 'charged' : 'not_charged' });
  }

  /**
   * Bills the checkpoints kept under a lapsed hold: the responses its dead node was running, each once (its request
   * id is the settlement's, so one settled before the node died is written as nothing), capped by the hold (the
   * money set aside for it; the rest of the balance may be spent since), then deletes them. What the ledger already
   * has for these checkpoints (settled by their node, or by an earlier pass that failed or died before the next one)
   * counts against the hold first, and no checkpoint is deleted before all are billed: a pass cut short between two
   * checkpoints would otherwise leave the next one to cap the rest at the whole hold again. A row PostgreSQL refuses
   * for a reason of its own is logged and deleted, so its hold is still released; any other failure throws, and the
   * hold stays in limbo for the next pass. Returns whether the ledger has a charge of these rows.
   */
  private async billUnfinished(hold: Hold): Promise<boolean> {
    const u = this.opts.unfinished;
    if (!u) return false;
    const kept = await u.rows.heldBy(hold.ref);
    if (!kept.length) return false;
    const already = await u.rows.settledCost(kept.map((k) => k.requestId));
    let left = hold.amount - already;
    let charged = false;
    for (const { requestId, row } of kept) {
      if (!row) {
        this.opts.log?.error('settlement.unfinished_unreadable', { id: requestId, msg: 'not a settlement this gateway wrote: deleted, nothing billed' });
        continue;
      }
      const bill = capAt(row, left);
      try {
        const out = await u.settle(bill);
        // One written before (by its node, or an earlier pass) is in `already`.
        if (out.inserted) left -= bill.cost;
        // Written now or before (its node settled it before dying): either way the ledger has its charge.
        charged = true;
        this.opts.log?.info('settlement.unfinished_billed', { id: requestId, hold: hold.ref, cost: out.inserted ? bill.cost : 0, outcome: out.inserted ? 'billed' : 'already_settled' });
      } catch (err) {
        if (!rowRefused(err)) throw err;
        this.opts.log?.error('settlement.unfinished_failed', { id: requestId, cause: errorText(err), row: JSON.stringify(bill) });
      }
    }
    for (const { requestId } of kept) await u.rows.remove(requestId);
    return charged;
  }

  /**
   * Checkpoints whose request is settled (its node died between the commit and the delete): deleted, never billed.
   * Not while another checkpoint of the same hold is unsettled: its billing counts the settled ones against the hold.
   */
  private async sweepUnfinished(): Promise<void> {
    try {
      const n = await this.opts.unfinished?.rows.sweepSettled();
      if (n) this.opts.log?.info('settlement.unfinished_swept', { count: n, msg: 'checkpoints of requests already settled' });
    } catch (err) {
      this.opts.log?.warn('settlement.unfinished_sweep_failed', { cause: errorText(err) });
    }
  }

  /**
   * The mirrors of users with holds, brought up to the ledger's versions. A balance move other than
   * a charge reaches the store through its writer's follow-up (followBalances); if that write is lost
   * (Redis answered an error, the writer died right after its commit), nothing else would correct a
   * lowered balance before the user's next commit, and every node would keep admitting against the
   * old one. Users admitting now are the ones it matters for, and the index already lists them.
   * Only newer versions are installed, so this never undoes a more recent release.
   */
  private async refreshMirrors(): Promise<void> {
    try {
      await refreshHolderMirrors(this.store, (ids) => this.ledger.accounts(ids));
    } catch (err) {
      this.opts.log?.warn('hold.mirror_refresh_failed', { cause: errorText(err) });
    }
  }

}

/** A checkpoint's row charging at most `cap` (flagged `capped` when cut). */
function capAt(row: SettlementRow, cap: number): SettlementRow {
  return row.cost <= cap ? row : { ...row, cost: Math.max(0, cap), usageFlag: withFlag(row.usageFlag, 'capped') };
}
