import { and, count, desc, eq, gt, inArray, sql, type SQL } from 'drizzle-orm';
import { balanceLimitError, isBalanceLimit, MAX_BALANCE, type ChangeBus } from '@gw/core';
import type { Db } from '../client';
import { ledger, redemptionCodes, topupOrders, topupReversals, users, webhookEvents } from '../schema';
import type { RedemptionCodeRow } from './redemption-codes';
import { closableFrom, type TopupOrderRow } from './topup-orders';
import { reverseTopupSqlite, type DecideReversal, type ReversalEventInput, type ReversalEventResult, type TopupReversalRow } from './topup-reversals';
import { emailTaken, usernameTaken, type NewUserRow, type UserRow } from './users';

const p = (name: string) => sql.placeholder(name);

export type LedgerRow = typeof ledger.$inferSelect;

/** A ledger listing page: newest first, optionally one user's and one kind's. */
export interface LedgerFilter { userId?: number; kind?: string; offset: number; limit: number }
/**
 * 'clawback' takes back quota credited by a top-up whose payment was refunded or disputed; 'reinstate'
 * gives it back when a dispute is won. Both name the order in their ref.
 */
export type LedgerKind = 'topup' | 'charge' | 'refund' | 'adjust' | 'redeem' | 'clawback' | 'reinstate';

export interface LedgerEntryInput {
  userId: number;
  kind: LedgerKind;
  /** Signed quota units. */
  amount: number;
  /** Unique per kind: the same (kind, ref) never applies twice. */
  ref: string;
  note?: string;
  actorId?: number | null;
  at: number;
}

/** An admin's balance change: refused (nothing written) when a debit would go below zero, unless allowed. */
export interface CheckedAdjustInput {
  userId: number;
  /** Signed, non-zero quota units. */
  amount: number;
  ref: string;
  note: string;
  actorId: number;
  at: number;
  allowNegative: boolean;
}

export type CheckedAdjustResult =
  | { ok: true; entry: LedgerRow }
  | { ok: false; reason: 'no_user' }
  | { ok: false; reason: 'insufficient'; balance: number };

/** The opening balance of a new user, credited as ledger kind 'adjust' with ref `user-create:<id>`. */
export interface OpeningBalance {
  amount: number;
  note: string;
  actorId: number | null;
}

/** A verified payment event, as the exactly-once top-up credit sees it. */
export interface TopupEventInput {
  provider: string;
  eventId: string;
  type: string;
  at: number;
  /** The order the event is about; null for events about none (nothing is read). */
  tradeNo: string | null;
}

/**
 * What the payment rules decide about an event's order. `close` moves a still-pending order out of
 * 'pending'; `credit` (only with 'paid') credits the order's user as ledger kind 'topup', ref = trade no,
 * keeps the provider's payment id on the order, and, when refunds or disputes arrived before the payment
 * was confirmed, takes `clawedBack` straight back (kind 'clawback', ref `<trade no>:at-credit`). `paid` keeps what the
 * customer paid when it is not the order's amount and currency (paid_amount, paid_currency).
 */
export type TopupDecision =
  | { outcome: string }
  | { outcome: string; close: 'failed' | 'expired' }
  | { outcome: string; close: 'paid'; credit: { amount: number; note: string; paymentRef?: string; clawedBack?: number; paid?: { amount: number; currency: string } } };

/**
 * The outcome of a paid event whose credit would take the balance above MAX_BALANCE: the order stays pending, the
 * event is recorded with this outcome, and a later delivery of the same event id is processed again.
 */
export const BALANCE_LIMIT_OUTCOME = 'balance_limit';

export type DecideTopup = (order: TopupOrderRow | undefined, ownerExists: boolean, reversals: TopupReversalRow[]) => TopupDecision;

export type TopupEventResult =
  | { duplicate: true }
  | { duplicate: false; outcome: string; credited: { userId: number; balance: number } | null };

/**
 * The ledger: every balance change and its row, written together. The multi-statement operations
 * are units of work here (one transaction each) rather than composed by services, because a pooled
 * PostgreSQL connection needs the transaction passed explicitly and bun:sqlite's transactions cannot
 * await. None of them emits events: the service emits after the returned promise resolves (commit).
 */
export interface LedgerStore {
  /**
   * Applies one entry in its own transaction. Returns the new balance, or null when (kind, ref) was
   * already applied (nothing changes). Emits `balance.changed` after commit.
   */
  apply(e: LedgerEntryInput): Promise<number | null>;
  /**
   * Check-then-write of an admin adjustment, race-free: two debits cannot both pass a check against the
   * same balance (SQLite: BEGIN IMMEDIATE; PostgreSQL: SELECT … FOR UPDATE on the user row).
   */
  adjustChecked(e: CheckedAdjustInput): Promise<CheckedAdjustResult>;
  /** Inserts a user and credits its opening balance (when non-zero) in one transaction; returns the row after. */
  createUserWithOpeningBalance(row: NewUserRow, opening: OpeningBalance | null): Promise<UserRow>;
  /**
   * Processes a payment event once: claims (provider, event id), reads the order and whether its user
   * still exists, asks `decide` (synchronous and pure: it runs inside the transaction), closes the order if still pending
   * (otherwise the outcome becomes `not_pending:<status>`), credits it, and records the outcome.
   * All or nothing; a second delivery of the event id gets `{ duplicate: true }`.
   */
  creditTopupOnce(e: TopupEventInput, decide: DecideTopup): Promise<TopupEventResult>;
  /**
   * Processes a refund or dispute event once: claims (provider, event id), finds the order by `e.lookup`
   * (locked against concurrent reversals of it), asks `decide` with its reversal rows, writes the reversal
   * row, the ledger entry of the change and the order's new clawed-back total, and records the outcome. All
   * or nothing; a second delivery of the event id gets `{ duplicate: true }`.
   */
  reverseTopupOnce(e: ReversalEventInput, decide: DecideReversal): Promise<ReversalEventResult>;
  /**
   * Marks an unused, unexpired code redeemed by `userId` and credits its quota (kind 'redeem', ref = code
   * id, note from `note(code)`), in one transaction; null when the code cannot be redeemed (nothing changes).
   */
  redeemCodeOnce(codeHash: string, userId: number, at: number, note: (code: RedemptionCodeRow) => string): Promise<{ quota: number; balance: number; codeId: number } | null>;
  list(f: LedgerFilter): Promise<{ items: LedgerRow[]; total: number }>;
  /** Sum of a user's ledger: must equal users.quota at all times. */
  sum(userId: number): Promise<number>;
}

/**
 * SQLite ledger. The three statements of an entry are prepared once: they run for every metered
 * request, and building the SQL each time cost several times more than executing it. Prepared
 * statements run on the connection, so inside `db.transaction` they join the open transaction.
 */
export class LedgerRepo implements LedgerStore {
  private readonly dupStmt;
  private readonly balanceStmt;
  private readonly insertStmt;
  private readonly existsStmt;

  constructor(private readonly db: Db, private readonly bus?: ChangeBus) {
    this.dupStmt = db.select({ id: ledger.id }).from(ledger).where(and(eq(ledger.kind, p('kind')), eq(ledger.ref, p('ref')))).prepare();
    // A credit moves the balance only while the result stays within MAX_BALANCE: the bound is a condition of the
    // write itself (SQLite's 64-bit integer arithmetic is exact here), so no read of the balance can go stale.
    this.balanceStmt = db.update(users).set({ quota: sql`${users.quota} + ${p('amount')}`, updatedAt: sql`${p('at')}` })
      .where(and(eq(users.id, p('userId')), sql`(${p('amount')} <= 0 OR ${users.quota} + ${p('amount')} <= ${MAX_BALANCE})`))
      .returning({ quota: users.quota }).prepare();
    this.existsStmt = db.select({ id: users.id }).from(users).where(eq(users.id, p('userId'))).prepare();
    this.insertStmt = db.insert(ledger).values({
      userId: p('userId'), kind: p('kind'), amount: p('amount'), balanceAfter: p('balanceAfter'), ref: p('ref'),
      note: p('note'), actorId: p('actorId'), createdAt: p('at'),
    } as any).prepare();
  }

  /**
   * One entry on the open transaction (the caller owns it): new balance, or null when (kind, ref) exists.
   * A credit that would take the balance above MAX_BALANCE throws balanceLimitError before anything is written,
   * so a caller may catch it and go on in the same transaction.
   */
  private write(e: LedgerEntryInput): number | null {
    if (this.dupStmt.get({ kind: e.kind, ref: e.ref })) return null;
    const u = this.balanceStmt.get({ amount: e.amount, at: e.at, userId: e.userId });
    if (!u && this.existsStmt.get({ userId: e.userId })) throw balanceLimitError();
    if (!u) throw new Error(`ledger: no user ${e.userId}`);
    this.insertStmt.run({
      userId: e.userId, kind: e.kind, amount: e.amount, balanceAfter: u.quota,
      ref: e.ref, note: e.note ?? '', actorId: e.actorId ?? null, at: e.at,
    });
    return u.quota;
  }

  async apply(e: LedgerEntryInput): Promise<number | null> {
    const balance = this.db.transaction(() => this.write(e));
    if (balance !== null) await this.bus?.committed('balance.changed', { userId: e.userId, balance });
    return balance;
  }

  async adjustChecked(e: CheckedAdjustInput): Promise<CheckedAdjustResult> {
    // IMMEDIATE takes the write lock before the read, so the check and the debit see one balance.
    return this.db.transaction((tx): CheckedAdjustResult => {
      const cur = tx.select({ quota: users.quota }).from(users).where(eq(users.id, e.userId)).get();
      if (!cur) return { ok: false, reason: 'no_user' };
      if (cur.quota + e.amount < 0 && !e.allowNegative) return { ok: false, reason: 'insufficient', balance: cur.quota };
      // Debits have a floor too: allow_negative, repeated, must not take a balance out of the exact range either.
      if (e.amount < 0 && cur.quota + e.amount < -MAX_BALANCE) throw balanceLimitError('debit');
      const balance = this.write({ userId: e.userId, kind: 'adjust', amount: e.amount, ref: e.ref, note: e.note, actorId: e.actorId, at: e.at });
      if (balance === null) throw new Error(`duplicate adjustment ref ${e.ref}`);
      return { ok: true, entry: tx.select().from(ledger).where(and(eq(ledger.kind, 'adjust'), eq(ledger.ref, e.ref))).get()! };
    }, { behavior: 'immediate' });
  }

  async createUserWithOpeningBalance(row: NewUserRow, opening: OpeningBalance | null): Promise<UserRow> {
    return this.db.transaction((tx) => {
      // Usernames are unique ignoring ASCII case, checked in the write (see usernameTaken).
      if (tx.select({ id: users.id }).from(users).where(sql`lower(${users.username}) = lower(${row.username})`).get()) throw usernameTaken(row.username);
      // Likewise e-mail addresses (see emailTaken).
      if (row.email && tx.select({ id: users.id }).from(users).where(sql`lower(${users.email}) = lower(${row.email})`).get()) throw emailTaken();
      const u = tx.insert(users).values(row).returning().get();
      if (!opening?.amount) return u;
      // The opening balance is a ledger entry like any other, so balance == sum(ledger) from the start.
      this.write({ userId: u.id, kind: 'adjust', amount: opening.amount, ref: `user-create:${u.id}`, note: opening.note, actorId: opening.actorId, at: row.createdAt });
      return tx.select().from(users).where(eq(users.id, u.id)).get()!;
    });
  }

  async creditTopupOnce(e: TopupEventInput, decide: DecideTopup): Promise<TopupEventResult> {
    return this.db.transaction((tx): TopupEventResult => {
      // An event whose credit found no room under MAX_BALANCE (outcome balance_limit) is claimed again by its retry.
      const claimed = tx.insert(webhookEvents)
        .values({ provider: e.provider, eventId: e.eventId, type: e.type, outcome: 'processing', receivedAt: e.at })
        .onConflictDoUpdate({ target: [webhookEvents.provider, webhookEvents.eventId], set: { outcome: 'processing' }, setWhere: eq(webhookEvents.outcome, BALANCE_LIMIT_OUTCOME) })
        .returning({ id: webhookEvents.id }).get();
      if (!claimed) return { duplicate: true };
      const order = e.tradeNo === null ? undefined : tx.select().from(topupOrders).where(eq(topupOrders.tradeNo, e.tradeNo)).get();
      const ownerExists = !!order && !!tx.select({ id: users.id }).from(users).where(eq(users.id, order.userId)).get();
      const reversals = order ? tx.select().from(topupReversals).where(eq(topupReversals.tradeNo, order.tradeNo)).all() : [];
      const d = decide(order, ownerExists, reversals);
      let outcome = d.outcome;
      let credited: { userId: number; balance: number } | null = null;
      if ('close' in d) {
        if (!order) throw new Error('creditTopupOnce: a decision to close needs an order');
        try {
          // A savepoint: a credit that finds no room under MAX_BALANCE leaves the order pending, and only the outcome is kept.
          tx.transaction((sp) => {
            // The status guard makes the transition happen once (see closableFrom).
            const closed = sp.update(topupOrders)
              .set({ status: d.close, updatedAt: e.at, ...(d.close === 'paid' ? { paidAt: e.at } : {}) })
              .where(and(eq(topupOrders.tradeNo, order.tradeNo), inArray(topupOrders.status, closableFrom(d.close)))).returning({ id: topupOrders.id }).get();
            if (!closed) outcome = `not_pending:${order.status}`;
            else if ('credit' in d) {
              let balance = this.write({ userId: order.userId, kind: 'topup', amount: d.credit.amount, ref: order.tradeNo, note: d.credit.note, at: e.at });
              // The order was pending, so its credit cannot exist; if it does, undo the status change too.
              if (balance === null) throw new Error(`ledger already holds topup ${order.tradeNo} for a pending order`);
              const clawedBack = d.credit.clawedBack ?? 0;
              if (clawedBack > 0) {
                balance = this.write({ userId: order.userId, kind: 'clawback', amount: -clawedBack, ref: `${order.tradeNo}:at-credit`, note: 'refunded or disputed before the payment was confirmed', at: e.at });
                if (balance === null) throw new Error(`ledger already holds clawback ${order.tradeNo}:at-credit for a pending order`);
              }
              sp.update(topupOrders).set({ paymentRef: d.credit.paymentRef ?? '', clawedBack, paidAmount: d.credit.paid?.amount ?? 0, paidCurrency: d.credit.paid?.currency ?? '' }).where(eq(topupOrders.tradeNo, order.tradeNo)).run();
              credited = { userId: order.userId, balance };
            }
          });
        } catch (err) {
          if (!isBalanceLimit(err)) throw err;
          outcome = BALANCE_LIMIT_OUTCOME;
        }
      }
      tx.update(webhookEvents).set({ outcome }).where(and(eq(webhookEvents.provider, e.provider), eq(webhookEvents.eventId, e.eventId))).run();
      return { duplicate: false, outcome, credited };
    }, { behavior: 'immediate' });
  }

  async reverseTopupOnce(e: ReversalEventInput, decide: DecideReversal): Promise<ReversalEventResult> {
    return this.db.transaction((tx) => reverseTopupSqlite(tx, e, decide, (entry) => this.write(entry)), { behavior: 'immediate' });
  }

  async redeemCodeOnce(codeHash: string, userId: number, at: number, note: (code: RedemptionCodeRow) => string): Promise<{ quota: number; balance: number; codeId: number } | null> {
    return this.db.transaction((tx) => {
      // The guard in the WHERE clause makes the transition happen once: a concurrent or later caller gets nothing.
      const row = tx.update(redemptionCodes).set({ status: 'redeemed', redeemedBy: userId, redeemedAt: at })
        .where(and(eq(redemptionCodes.codeHash, codeHash), eq(redemptionCodes.status, 'unused'), gt(redemptionCodes.expiresAt, at)))
        .returning().get();
      if (!row) return null;
      const balance = this.write({ userId, kind: 'redeem', amount: row.quota, ref: String(row.id), note: note(row), at });
      // The code was unused, so its credit cannot exist; if it does, roll the claim back too.
      if (balance === null) throw new Error(`ledger already holds redeem ${row.id} for an unused code`);
      return { quota: row.quota, balance, codeId: row.id };
    }, { behavior: 'immediate' });
  }

  async list(f: LedgerFilter): Promise<{ items: LedgerRow[]; total: number }> {
    return listLedger(this.db, f);
  }

  async sum(userId: number): Promise<number> {
    return this.db.select({ s: sql<number>`coalesce(sum(${ledger.amount}), 0)` }).from(ledger).where(eq(ledger.userId, userId)).get()!.s;
  }
}

/** A ledger listing page and the count of every match, on the calling thread (the repository's and the history worker's). */
export function listLedger(db: Db, f: LedgerFilter): { items: LedgerRow[]; total: number } {
  const conds: SQL[] = [];
  if (f.userId !== undefined) conds.push(eq(ledger.userId, f.userId));
  if (f.kind) conds.push(eq(ledger.kind, f.kind));
  const where = conds.length ? and(...conds) : undefined;
  const items = db.select().from(ledger).where(where).orderBy(desc(ledger.id)).limit(f.limit).offset(f.offset).all();
  const total = db.select({ n: count() }).from(ledger).where(where).get()!.n;
  return { items, total };
}
