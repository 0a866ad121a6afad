import { asc, eq } from 'drizzle-orm';
import type { Db } from '../client';
import { prices } from '../schema';

export type PriceRow = typeof prices.$inferSelect;
export type NewPriceRow = typeof prices.$inferInsert;

/** Storage of per-model prices (quota units per million tokens). */
export class PricesRepo {
  constructor(private readonly db: Db) {}

  all(): PriceRow[] {
    return this.db.select().from(prices).orderBy(asc(prices.model)).all();
  }

  byModel(model: string): PriceRow | undefined {
    return this.db.select().from(prices).where(eq(prices.model, model)).get();
  }

  /** Inserts or replaces the price of `row.model`. */
  upsert(row: NewPriceRow): PriceRow {
    const { model, ...rest } = row;
    return this.db.insert(prices).values(row).onConflictDoUpdate({ target: prices.model, set: rest }).returning().get();
  }

  delete(model: string): boolean {
    return this.db.delete(prices).where(eq(prices.model, model)).returning({ m: prices.model }).all().length > 0;
  }
}
