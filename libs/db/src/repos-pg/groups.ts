import { asc, eq } from 'drizzle-orm';
import type { PgDb } from '../pg/client';
import { groups } from '../schema-pg';
import type { GroupRow, NewGroupRow } from '../repos/groups';
import { collateC } from './sql';

/** PostgreSQL twin of ../repos/groups.ts (same methods, async). */
export class PgGroupsRepo {
  constructor(private readonly db: PgDb) {}

  /** Ordered by name under "C" collation: SQLite compares text bytewise, so both backends list alike. */
  async all(): Promise<GroupRow[]> {
    return this.db.select().from(groups).orderBy(asc(collateC(groups.name)));
  }

  async byId(id: number): Promise<GroupRow | undefined> {
    return (await this.db.select().from(groups).where(eq(groups.id, id)))[0];
  }

  async insert(row: NewGroupRow): Promise<GroupRow | null> {
    return (await this.db.insert(groups).values(row).onConflictDoNothing({ target: groups.name }).returning())[0] ?? null;
  }

  async update(id: number, patch: Partial<NewGroupRow>): Promise<GroupRow | undefined> {
    return (await this.db.update(groups).set(patch).where(eq(groups.id, id)).returning())[0];
  }

  async delete(id: number): Promise<boolean> {
    return (await this.db.delete(groups).where(eq(groups.id, id)).returning({ id: groups.id })).length > 0;
  }
}
