import { asc, eq } from 'drizzle-orm';
import type { Db } from '../client';
import { groups } from '../schema';

export type GroupRow = typeof groups.$inferSelect;
export type NewGroupRow = typeof groups.$inferInsert;

/** Storage of groups; knows SQL, no rules. */
export class GroupsRepo {
  constructor(private readonly db: Db) {}

  all(): GroupRow[] {
    return this.db.select().from(groups).orderBy(asc(groups.name)).all();
  }

  byId(id: number): GroupRow | undefined {
    return this.db.select().from(groups).where(eq(groups.id, id)).get();
  }

  insert(row: NewGroupRow): GroupRow {
    return this.db.insert(groups).values(row).returning().get();
  }

  update(id: number, patch: Partial<NewGroupRow>): GroupRow | undefined {
    return this.db.update(groups).set(patch).where(eq(groups.id, id)).returning().get();
  }

  delete(id: number): boolean {
    return this.db.delete(groups).where(eq(groups.id, id)).returning({ id: groups.id }).all().length > 0;
  }
}
