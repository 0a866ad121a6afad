import { asc, eq, inArray } from 'drizzle-orm';
import { inChunks } from '../repos/in-chunks';
import type { PgDb } from '../pg/client';
import { prices } from '../schema-pg';
import type { NewPriceRow, PriceRow } from '../repos/prices';
import { collateC } from './sql';

/** PostgreSQL twin of ../repos/prices.ts (same methods, async). */
export class PgPricesRepo {
  constructor(private readonly db: PgDb) {}

  async all(): Promise<PriceRow[]> {
    return this.db.select().from(prices).orderBy(asc(collateC(prices.model)));
  }

  async byModel(model: string): Promise<PriceRow | undefined> {
    return (await this.db.select().from(prices).where(eq(prices.model, model)))[0];
  }

  async byModels(models: string[]): Promise<PriceRow[]> {
    return inChunks(models, (chunk) => this.db.select().from(prices).where(inArray(prices.model, chunk)));
  }

  async upsert(row: NewPriceRow): Promise<PriceRow> {
    const { model, ...rest } = row;
    return (await this.db.insert(prices).values(row).onConflictDoUpdate({ target: prices.model, set: rest }).returning())[0]!;
  }

  async delete(model: string): Promise<boolean> {
    return (await this.db.delete(prices).where(eq(prices.model, model)).returning({ m: prices.model })).length > 0;
  }
}
