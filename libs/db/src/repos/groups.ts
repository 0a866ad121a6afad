import { asc, eq } from 'drizzle-orm';
import type { Db } from '../client';
import { groups } from '../schema';

export type GroupRow = typeof groups.$inferSelect;
export type NewGroupRow = typeof groups.$inferInsert;

/** Groups: storage interface. */
export interface GroupsStore {
  all(): Promise<GroupRow[]>;
  byId(id: number): Promise<GroupRow | undefined>;
  /** null when the name is taken (a concurrent create, on this node or another, got it first). */
  insert(row: NewGroupRow): Promise<GroupRow | null>;
  update(id: number, patch: Partial<NewGroupRow>): Promise<GroupRow | undefined>;
  delete(id: number): Promise<boolean>;
}

/** Storage of groups; knows SQL, no rules. */
export class GroupsRepo implements GroupsStore {
  constructor(private readonly db: Db) {}

  async all(): Promise<GroupRow[]> {
    return this.db.select().from(groups).orderBy(asc(groups.name)).all();
  }

  async byId(id: number): Promise<GroupRow | undefined> {
    return this.db.select().from(groups).where(eq(groups.id, id)).get();
  }

  async insert(row: NewGroupRow): Promise<GroupRow | null> {
    return this.db.insert(groups).values(row).onConflictDoNothing({ target: groups.name }).returning().get() ?? null;
  }

  async update(id: number, patch: Partial<NewGroupRow>): Promise<GroupRow | undefined> {
    return this.db.update(groups).set(patch).where(eq(groups.id, id)).returning().get();
  }

  async delete(id: number): Promise<boolean> {
    return this.db.delete(groups).where(eq(groups.id, id)).returning({ id: groups.id }).all().length > 0;
  }
}
