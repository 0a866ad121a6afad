import { and, count, desc, eq, sql, type SQL } from 'drizzle-orm';
const p = (name: string) => sql.placeholder(name);
import type { ChangeBus } from '@gw/core';
import type { Db } from '../client';
import { ledger, users } from '../schema';

export type LedgerRow = typeof ledger.$inferSelect;
export type LedgerKind = 'topup' | 'charge' | 'refund' | 'adjust' | 'redeem';

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

/**
 * Balance changes and their ledger rows, always written together. The three statements of `apply`
 * are prepared once: they run for every metered request, and building the SQL each time cost several
 * times more than executing it. Prepared statements run on the connection, so they take part in
 * whatever transaction is open on it.
 */
export class LedgerRepo {
  private readonly dupStmt;
  private readonly balanceStmt;
  private readonly insertStmt;

  constructor(private readonly db: Db, private readonly bus?: ChangeBus) {
    this.dupStmt = db.select({ id: ledger.id }).from(ledger).where(and(eq(ledger.kind, p('kind')), eq(ledger.ref, p('ref')))).prepare();
    this.balanceStmt = db.update(users).set({ quota: sql`${users.quota} + ${p('amount')}`, updatedAt: sql`${p('at')}` })
      .where(eq(users.id, p('userId'))).returning({ quota: users.quota }).prepare();
    this.insertStmt = db.insert(ledger).values({
      userId: p('userId'), kind: p('kind'), amount: p('amount'), balanceAfter: p('balanceAfter'), ref: p('ref'),
      note: p('note'), actorId: p('actorId'), createdAt: p('at'),
    } as any).prepare();
  }

  /**
   * Applies a balance change and its ledger row in the caller's transaction (or a new one).
   * Returns the new balance, or null when (kind, ref) was already applied (nothing changes).
   * With its own transaction it emits `balance.changed` after commit; a caller passing `tx` must emit
   * it (or `user.changed`) after its own commit.
   */
  apply(e: LedgerEntryInput, tx: Pick<Db, 'select' | 'insert' | 'update'> = this.db): number | null {
    const run = () => {
      if (this.dupStmt.get({ kind: e.kind, ref: e.ref })) return null;
      const u = this.balanceStmt.get({ amount: e.amount, at: e.at, userId: e.userId });
      if (!u) throw new Error(`ledger: no user ${e.userId}`);
      this.insertStmt.run({
        userId: e.userId, kind: e.kind, amount: e.amount, balanceAfter: u.quota,
        ref: e.ref, note: e.note ?? '', actorId: e.actorId ?? null, at: e.at,
      });
      return u.quota;
    };
    // `tx` only says a transaction is already open on this connection; the statements join it.
    if (tx !== this.db) return run();
    const balance = this.db.transaction(() => run());
    if (balance !== null) this.bus?.emit('balance.changed', { userId: e.userId, balance });
    return balance;
  }

  list(f: { userId?: number; kind?: string; offset: number; limit: number }): { items: LedgerRow[]; total: number } {
    const conds: SQL[] = [];
    if (f.userId !== undefined) conds.push(eq(ledger.userId, f.userId));
    if (f.kind) conds.push(eq(ledger.kind, f.kind));
    const where = conds.length ? and(...conds) : undefined;
    const items = this.db.select().from(ledger).where(where).orderBy(desc(ledger.id)).limit(f.limit).offset(f.offset).all();
    const total = this.db.select({ n: count() }).from(ledger).where(where).get()!.n;
    return { items, total };
  }

  /** Sum of a user's ledger: must equal users.quota at all times. */
  sum(userId: number): number {
    return this.db.select({ s: sql<number>`coalesce(sum(${ledger.amount}), 0)` }).from(ledger).where(eq(ledger.userId, userId)).get()!.s;
  }
}
