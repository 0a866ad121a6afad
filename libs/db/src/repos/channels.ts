import { and, count, desc, eq, inArray, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client';
import { channels } from '../schema';

export type ChannelRow = typeof channels.$inferSelect;
export type NewChannelRow = typeof channels.$inferInsert;

export interface ChannelListFilter {
  status?: number;
  tag?: string;
  type?: string;
  /** Channels whose `models` list contains this model exactly. */
  model?: string;
  /** Channels whose comma-separated `group` contains this group. */
  group?: string;
  /** Case-insensitive substring of the name. */
  keyword?: string;
  offset: number;
  limit: number;
}

/** Upstream channels: storage interface. */
export interface ChannelsStore {
  byId(id: number): Promise<ChannelRow | undefined>;
  all(): Promise<ChannelRow[]>;
  insert(row: NewChannelRow): Promise<ChannelRow>;
  update(id: number, patch: Partial<NewChannelRow>): Promise<ChannelRow | undefined>;
  delete(id: number): Promise<boolean>;
  /** The ids that existed (callers announce exactly these rows). */
  deleteMany(ids: number[]): Promise<number[]>;
  /** Sets the status of every channel with `tag`; returns how many rows matched. */
  /** The ids of the rows that matched. */
  setStatusByTag(tag: string, status: number, reason: string, at: number): Promise<number[]>;
  list(f: ChannelListFilter): Promise<{ items: ChannelRow[]; total: number }>;
}

/** Storage of upstream channels; knows SQL, no rules. */
export class ChannelsRepo implements ChannelsStore {
  constructor(private readonly db: Db) {}

  async byId(id: number): Promise<ChannelRow | undefined> {
    return this.db.select().from(channels).where(eq(channels.id, id)).get();
  }

  async all(): Promise<ChannelRow[]> {
    return this.db.select().from(channels).all();
  }

  async insert(row: NewChannelRow): Promise<ChannelRow> {
    return this.db.insert(channels).values(row).returning().get();
  }

  async update(id: number, patch: Partial<NewChannelRow>): Promise<ChannelRow | undefined> {
    return this.db.update(channels).set(patch).where(eq(channels.id, id)).returning().get();
  }

  async delete(id: number): Promise<boolean> {
    return this.db.delete(channels).where(eq(channels.id, id)).returning({ id: channels.id }).all().length > 0;
  }

  /** Deletes these ids; returns the ids that existed. */
  async deleteMany(ids: number[]): Promise<number[]> {
    if (!ids.length) return [];
    return this.db.delete(channels).where(inArray(channels.id, ids)).returning({ id: channels.id }).all().map((r) => r.id);
  }

  /** Sets the status of every channel with `tag`; returns the ids of the rows that matched. */
  async setStatusByTag(tag: string, status: number, reason: string, at: number): Promise<number[]> {
    return this.db.update(channels).set({ status, statusReason: reason, updatedAt: at })
      .where(eq(channels.tag, tag)).returning({ id: channels.id }).all().map((r) => r.id);
  }

  async list(f: ChannelListFilter): Promise<{ items: ChannelRow[]; total: number }> {
    const conds: SQL[] = [];
    if (f.status !== undefined) conds.push(eq(channels.status, f.status));
    if (f.tag !== undefined) conds.push(eq(channels.tag, f.tag));
    if (f.type !== undefined) conds.push(eq(channels.type, f.type));
    // instr() rather than LIKE: user input never acts as a wildcard.
    if (f.keyword) conds.push(sql`instr(lower(${channels.name}), lower(${f.keyword})) > 0`);
    if (f.model !== undefined) conds.push(sql`exists (select 1 from json_each(${channels.models}) where value = ${f.model})`);
    if (f.group !== undefined) conds.push(sql`instr(',' || ${channels.group} || ',', ',' || ${f.group} || ',') > 0`);
    const where = conds.length ? and(...conds) : undefined;
    const items = this.db.select().from(channels).where(where).orderBy(desc(channels.id)).limit(f.limit).offset(f.offset).all();
    const total = this.db.select({ n: count() }).from(channels).where(where).get()!.n;
    return { items, total };
  }
}
