import { asc, eq, inArray } from 'drizzle-orm';
import { inChunks } from './in-chunks';
import type { Db } from '../client';
import { prices } from '../schema';

export type PriceRow = typeof prices.$inferSelect;
export type NewPriceRow = typeof prices.$inferInsert;

/** Per-model prices: storage interface. */
export interface PricesStore {
  all(): Promise<PriceRow[]>;
  byModel(model: string): Promise<PriceRow | undefined>;
  /** The prices of those models that exist, in no particular order (the price book applying a burst of changes at once). */
  byModels(models: string[]): Promise<PriceRow[]>;
  /** Inserts or replaces the price of `row.model`. */
  upsert(row: NewPriceRow): Promise<PriceRow>;
  delete(model: string): Promise<boolean>;
}

/** Storage of per-model prices (quota units per million tokens). */
export class PricesRepo implements PricesStore {
  constructor(private readonly db: Db) {}

  async all(): Promise<PriceRow[]> {
    return this.db.select().from(prices).orderBy(asc(prices.model)).all();
  }

  async byModel(model: string): Promise<PriceRow | undefined> {
    return this.db.select().from(prices).where(eq(prices.model, model)).get();
  }

  async byModels(models: string[]): Promise<PriceRow[]> {
    return inChunks(models, (chunk) => this.db.select().from(prices).where(inArray(prices.model, chunk)).all());
  }

  /** Inserts or replaces the price of `row.model`. */
  async upsert(row: NewPriceRow): Promise<PriceRow> {
    const { model, ...rest } = row;
    return this.db.insert(prices).values(row).onConflictDoUpdate({ target: prices.model, set: rest }).returning().get();
  }

  async delete(model: string): Promise<boolean> {
    return this.db.delete(prices).where(eq(prices.model, model)).returning({ m: prices.model }).all().length > 0;
  }
}
