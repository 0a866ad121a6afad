import { and, count, desc, eq, sql, type SQL } from 'drizzle-orm';
import type { ChangeBus } from '@gw/core';
import type { PgDb } from '../pg/client';
import { ledger, users } from '../schema-pg';
import type { LedgerEntryInput, LedgerRow } from '../repos/ledger';
import type { PgWriter } from './sql';

/** PostgreSQL twin of ../repos/ledger.ts (same methods, async). */
export class PgLedgerRepo {
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
    const run = async (w: PgWriter) => {
      const [u] = await w.select({ quota: users.quota }).from(users).where(eq(users.id, e.userId)).for('update');
      if (!u) throw new Error(`ledger: no user ${e.userId}`);
      const balance = u.quota + e.amount;
      const ins = await w.insert(ledger).values({
        userId: e.userId, kind: e.kind, amount: e.amount, balanceAfter: balance, ref: e.ref,
        note: e.note ?? '', actorId: e.actorId ?? null, createdAt: e.at,
      }).onConflictDoNothing({ target: [ledger.kind, ledger.ref] }).returning({ id: ledger.id });
      if (!ins.length) return null;
      await w.update(users).set({ quota: sql`${users.quota} + ${e.amount}`, updatedAt: e.at }).where(eq(users.id, e.userId));
      return balance;
    };
    if (tx && tx !== this.db) return run(tx);
    const balance = await this.db.transaction((t) => run(t));
    if (balance !== null) this.bus?.emit('balance.changed', { userId: e.userId, balance });
    return balance;
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
