import { and, count, desc, eq, gt, inArray, sql, type SQL } from 'drizzle-orm';
import { balanceLimitError, isBalanceLimit, MAX_BALANCE, type ChangeBus } from '@gw/core';
import type { PgDb } from '../pg/client';
import { ledger, redemptionCodes, topupOrders, topupReversals, users, webhookEvents } from '../schema-pg';
import { BALANCE_LIMIT_OUTCOME } from '../repos/ledger';
import { closableFrom } from '../repos/topup-orders';
import type {
  CheckedAdjustInput, CheckedAdjustResult, DecideTopup, LedgerEntryInput, LedgerRow, LedgerStore, OpeningBalance, TopupEventInput,
  TopupEventResult,
} from '../repos/ledger';
import type { RedemptionCodeRow } from '../repos/redemption-codes';
import type { DecideReversal, ReversalEventInput, ReversalEventResult } from '../repos/topup-reversals';
import { reverseTopupPg } from './topup-reversals';
import { emailTaken, usernameTaken, USERNAME_LOCK, type NewUserRow, type UserRow } from '../repos/users';
import { asciiLower } from './sql';
import type { PgWriter } from './sql';

/**
 * PostgreSQL twin of ../repos/ledger.ts (same methods, async). Each unit of work is one
 * `db.transaction` with every statement on its `tx`: a pool has no "open transaction of the
 * connection" for a statement on `db` to join. Like the SQLite versions, only `apply` emits.
 */
export class PgLedgerRepo implements LedgerStore {
  constructor(private readonly db: PgDb, private readonly bus?: ChangeBus) {}

  /**
   * Applies a balance change and its ledger row in `tx` (or a transaction of its own). Returns the
   * new balance, or null when (kind, ref) was already applied (nothing changes).
   *
   * Order matters under READ COMMITTED, where a "select then insert" duplicate check races: the
   * user row is locked first (so balance_after is exact against concurrent changes of that user),
   * then the ledger row is inserted ON CONFLICT DO NOTHING (a concurrent insert of the same
   * (kind, ref) makes this one wait for it and then do nothing), and only an inserted row moves
   * the balance. With its own transaction it emits `balance.changed` after commit; a caller passing
   * `tx` must emit it (or `user.changed`) after its own commit.
   */
  async apply(e: LedgerEntryInput, tx?: PgWriter): Promise<number | null> {
    if (tx && tx !== this.db) return (await this.applyIn(e, tx))?.balance ?? null;
    const out = await this.db.transaction((t) => this.applyIn(e, t));
    // With its version, so the shared admission store can install it without reading the row again.
    if (out) await this.bus?.committed('balance.changed', { userId: e.userId, balance: out.balance, version: out.version });
    return out?.balance ?? null;
  }

  private async applyIn(e: LedgerEntryInput, w: PgWriter): Promise<{ balance: number; version: number } | null> {
    // The bound is compared in SQL (bigint, exact) on the row this statement locks, so it holds for the write below:
    // a concurrent credit of the same user waits here and then reads the balance this one leaves.
    const [u] = await w.select({ quota: users.quota, fits: sql<boolean>`${users.quota} + ${e.amount}::bigint <= ${MAX_BALANCE}::bigint` })
      .from(users).where(eq(users.id, e.userId)).for('update');
    if (!u) throw new Error(`ledger: no user ${e.userId}`);
    // Before anything is written, so a caller may catch it and go on in the same transaction.
    if (e.amount > 0 && !u.fits) throw balanceLimitError();
    const balance = u.quota + e.amount;
    const ins = await w.insert(ledger).values({
      userId: e.userId, kind: e.kind, amount: e.amount, balanceAfter: balance, ref: e.ref,
      note: e.note ?? '', actorId: e.actorId ?? null, createdAt: e.at,
    }).onConflictDoNothing({ target: [ledger.kind, ledger.ref] }).returning({ id: ledger.id });
    if (!ins.length) return null;
    const [v] = await w.update(users).set({ quota: sql`${users.quota} + ${e.amount}`, updatedAt: e.at }).where(eq(users.id, e.userId))
      .returning({ version: users.balanceVersion });
    return { balance, version: v!.version };
  }

  async adjustChecked(e: CheckedAdjustInput): Promise<CheckedAdjustResult> {
    return this.db.transaction(async (tx): Promise<CheckedAdjustResult> => {
      // The row lock makes the check and the debit see one balance: a concurrent adjustment of the same
      // user waits here until this one commits, then reads the balance it left (SQLite: BEGIN IMMEDIATE).
      const [cur] = await tx.select({ quota: users.quota }).from(users).where(eq(users.id, e.userId)).for('update');
      if (!cur) return { ok: false, reason: 'no_user' };
      if (cur.quota + e.amount < 0 && !e.allowNegative) return { ok: false, reason: 'insufficient', balance: cur.quota };
      // Debits have a floor too: allow_negative, repeated, must not take a balance out of the exact range either.
      if (e.amount < 0 && cur.quota + e.amount < -MAX_BALANCE) throw balanceLimitError('debit');
      const balance = await this.apply({ userId: e.userId, kind: 'adjust', amount: e.amount, ref: e.ref, note: e.note, actorId: e.actorId, at: e.at }, tx);
      if (balance === null) throw new Error(`duplicate adjustment ref ${e.ref}`);
      const [entry] = await tx.select().from(ledger).where(and(eq(ledger.kind, 'adjust'), eq(ledger.ref, e.ref)));
      return { ok: true, entry: entry! };
    });
  }

  async createUserWithOpeningBalance(row: NewUserRow, opening: OpeningBalance | null): Promise<UserRow> {
    return this.db.transaction(async (tx) => {
      // Usernames are unique ignoring ASCII case, checked under one lock for every username write (see usernameTaken).
      await tx.execute(sql`select pg_advisory_xact_lock(hashtext(${USERNAME_LOCK}))`);
      const [clash] = await tx.select({ id: users.id }).from(users).where(eq(asciiLower(users.username), asciiLower(row.username)));
      if (clash) throw usernameTaken(row.username);
      // Likewise e-mail addresses, under the same lock (see emailTaken).
      if (row.email && (await tx.select({ id: users.id }).from(users).where(eq(asciiLower(users.email), asciiLower(row.email))))[0]) throw emailTaken();
      const [u] = await tx.insert(users).values(row).returning();
      if (!opening?.amount) return u!;
      // The opening balance is a ledger entry like any other, so balance == sum(ledger) from the start.
      await this.apply({ userId: u!.id, kind: 'adjust', amount: opening.amount, ref: `user-create:${u!.id}`, note: opening.note, actorId: opening.actorId, at: row.createdAt }, tx);
      return (await tx.select().from(users).where(eq(users.id, u!.id)))[0]!;
    });
  }

  async creditTopupOnce(e: TopupEventInput, decide: DecideTopup): Promise<TopupEventResult> {
    return this.db.transaction(async (tx): Promise<TopupEventResult> => {
      // A concurrent delivery of the same event id waits on the unique index until this transaction
      // ends; after a commit it inserts nothing (a duplicate), after a rollback it claims the event itself.
      // An event whose credit found no room under MAX_BALANCE (outcome balance_limit) is claimed again by its retry.
      const claimed = await tx.insert(webhookEvents)
        .values({ provider: e.provider, eventId: e.eventId, type: e.type, outcome: 'processing', receivedAt: e.at })
        .onConflictDoUpdate({ target: [webhookEvents.provider, webhookEvents.eventId], set: { outcome: 'processing' }, setWhere: eq(webhookEvents.outcome, BALANCE_LIMIT_OUTCOME) })
        .returning({ id: webhookEvents.id });
      if (!claimed.length) return { duplicate: true };
      // Locked, like a refund or dispute of the order locks it (topup-reversals.ts): a reversal recorded while the order
      // was pending is then either committed before the read below, or waits for this credit and settles against it.
      const order = e.tradeNo === null ? undefined : (await tx.select().from(topupOrders).where(eq(topupOrders.tradeNo, e.tradeNo)).for('update'))[0];
      // Not locked: a user deleted after this read makes the credit throw (500), and the provider's retry reads it gone.
      const ownerExists = !!order && (await tx.select({ id: users.id }).from(users).where(eq(users.id, order.userId))).length > 0;
      // A reversal that arrived first (refunded before the payment event got through) is taken back with the credit.
      const reversals = order ? await tx.select().from(topupReversals).where(eq(topupReversals.tradeNo, order.tradeNo)) : [];
      const d = decide(order, ownerExists, reversals);
      let outcome = d.outcome;
      let credited: { userId: number; balance: number } | null = null;
      if ('close' in d) {
        if (!order) throw new Error('creditTopupOnce: a decision to close needs an order');
        try {
          // A savepoint: a credit that finds no room under MAX_BALANCE leaves the order pending, and only the outcome is kept.
          await tx.transaction(async (sp) => {
            // The status guard (closableFrom) makes the transition happen once: under READ COMMITTED a second
            // UPDATE (another event for the same order) waits for the first and re-checks the guard after it commits.
            const closed = await sp.update(topupOrders)
              .set({ status: d.close, updatedAt: e.at, ...(d.close === 'paid' ? { paidAt: e.at } : {}) })
              .where(and(eq(topupOrders.tradeNo, order.tradeNo), inArray(topupOrders.status, closableFrom(d.close)))).returning({ id: topupOrders.id });
            if (!closed.length) {
              // The order read above may predate the transition that beat this one (it committed while the
              // UPDATE waited): a new statement sees the status that made the guard fail.
              const [now] = await sp.select({ status: topupOrders.status }).from(topupOrders).where(eq(topupOrders.tradeNo, order.tradeNo));
              outcome = `not_pending:${now?.status ?? order.status}`;
            }
            else if ('credit' in d) {
              let balance = await this.apply({ userId: order.userId, kind: 'topup', amount: d.credit.amount, ref: order.tradeNo, note: d.credit.note, at: e.at }, sp);
              // The order was pending, so its credit cannot exist; if it does, undo the status change too.
              if (balance === null) throw new Error(`ledger already holds topup ${order.tradeNo} for a pending order`);
              const clawedBack = d.credit.clawedBack ?? 0;
              if (clawedBack > 0) {
                balance = await this.apply({ userId: order.userId, kind: 'clawback', amount: -clawedBack, ref: `${order.tradeNo}:at-credit`, note: 'refunded or disputed before the payment was confirmed', at: e.at }, sp);
                if (balance === null) throw new Error(`ledger already holds clawback ${order.tradeNo}:at-credit for a pending order`);
              }
              await sp.update(topupOrders).set({ paymentRef: d.credit.paymentRef ?? '', clawedBack, paidAmount: d.credit.paid?.amount ?? 0, paidCurrency: d.credit.paid?.currency ?? '' }).where(eq(topupOrders.tradeNo, order.tradeNo));
              credited = { userId: order.userId, balance };
            }
          });
        } catch (err) {
          if (!isBalanceLimit(err)) throw err;
          outcome = BALANCE_LIMIT_OUTCOME;
        }
      }
      await tx.update(webhookEvents).set({ outcome }).where(and(eq(webhookEvents.provider, e.provider), eq(webhookEvents.eventId, e.eventId)));
      return { duplicate: false, outcome, credited };
    });
  }

  async reverseTopupOnce(e: ReversalEventInput, decide: DecideReversal): Promise<ReversalEventResult> {
    return this.db.transaction((tx) => reverseTopupPg(tx, e, decide, (entry) => this.apply(entry, tx)));
  }

  async redeemCodeOnce(codeHash: string, userId: number, at: number, note: (code: RedemptionCodeRow) => string): Promise<{ quota: number; balance: number; codeId: number } | null> {
    return this.db.transaction(async (tx) => {
      // A concurrent UPDATE of the same code waits for this one and re-checks the guard after it commits: one claim wins.
      const [row] = await tx.update(redemptionCodes).set({ status: 'redeemed', redeemedBy: userId, redeemedAt: at })
        .where(and(eq(redemptionCodes.codeHash, codeHash), eq(redemptionCodes.status, 'unused'), gt(redemptionCodes.expiresAt, at)))
        .returning();
      if (!row) return null;
      const balance = await this.apply({ userId, kind: 'redeem', amount: row.quota, ref: String(row.id), note: note(row), at }, tx);
      // The code was unused, so its credit cannot exist; if it does, roll the claim back too.
      if (balance === null) throw new Error(`ledger already holds redeem ${row.id} for an unused code`);
      return { quota: row.quota, balance, codeId: row.id };
    });
  }

  async list(f: { userId?: number; kind?: string; offset: number; limit: number }): Promise<{ items: LedgerRow[]; total: number }> {
    const conds: SQL[] = [];
    if (f.userId !== undefined) conds.push(eq(ledger.userId, f.userId));
    if (f.kind) conds.push(eq(ledger.kind, f.kind));
    const where = conds.length ? and(...conds) : undefined;
    const [items, [t]] = await Promise.all([
      this.db.select().from(ledger).where(where).orderBy(desc(ledger.id)).limit(f.limit).offset(f.offset),
      this.db.select({ n: count() }).from(ledger).where(where),
    ]);
    return { items, total: t!.n };
  }

  /** Sum of a user's ledger: must equal users.quota at all times. PG's sum(bigint) is numeric: cast back. */
  async sum(userId: number): Promise<number> {
    const [r] = await this.db.select({ s: sql<number>`coalesce(sum(${ledger.amount}), 0)::bigint`.mapWith(Number) })
      .from(ledger).where(eq(ledger.userId, userId));
    return r!.s;
  }
}
