import { and, count, desc, eq, sql, type SQL } from 'drizzle-orm';
import type { ChangeBus } from '@gw/core';
import type { Db } from '../client';
import { ledger, users } from '../schema';

export type LedgerRow = typeof ledger.$inferSelect;
export type LedgerKind = 'topup' | 'charge' | 'refund' | 'adjust';

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

/** Balance changes and their ledger rows, always written together. */
export class LedgerRepo {
  constructor(private readonly db: Db, private readonly bus?: ChangeBus) {}

  /**
   * Applies a balance change and its ledger row in the caller's transaction (or a new one).
   * Returns the new balance, or null when (kind, ref) was already applied (nothing changes).
   * With its own transaction it emits `user.changed` after commit; a caller passing `tx` must emit
   * it after its own commit.
   */
  apply(e: LedgerEntryInput, tx: Pick<Db, 'select' | 'insert' | 'update'> = this.db): number | null {
    const run = (t: Pick<Db, 'select' | 'insert' | 'update'>) => {
      const dup = t.select({ id: ledger.id }).from(ledger).where(and(eq(ledger.kind, e.kind), eq(ledger.ref, e.ref))).get();
      if (dup) return null;
      const u = t.update(users)
        .set({ quota: sql`${users.quota} + ${e.amount}`, updatedAt: e.at })
        .where(eq(users.id, e.userId)).returning({ quota: users.quota }).get();
      if (!u) throw new Error(`ledger: no user ${e.userId}`);
      t.insert(ledger).values({
        userId: e.userId, kind: e.kind, amount: e.amount, balanceAfter: u.quota,
        ref: e.ref, note: e.note ?? '', actorId: e.actorId ?? null, createdAt: e.at,
      }).run();
      return u.quota;
    };
    if (tx !== this.db) return run(tx);
    const balance = this.db.transaction((t) => run(t));
    if (balance !== null) this.bus?.emit('user.changed', { userId: e.userId });
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
