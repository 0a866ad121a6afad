import { and, count, desc, eq, inArray, ne, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client';
import { channels } from '../schema';
import { inChunks } from './in-chunks';
import { CHANNEL_STATUS, type ChannelKeyEntry } from '../schema/channels';

const MANUALLY_DISABLED = CHANNEL_STATUS.manuallyDisabled;
export { ID_CHUNK } from './in-chunks';

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

/** The stored values a compare-and-set write is conditional on (see updateIf). */
export interface ChannelExpected {
  keys?: ChannelKeyEntry[];
  headers?: Record<string, string>;
}

/** Upstream channels: storage interface. */
export interface ChannelsStore {
  byId(id: number): Promise<ChannelRow | undefined>;
  /** The rows of those ids that exist, in no particular order (a cache applying a burst of changes at once). */
  byIds(ids: number[]): Promise<ChannelRow[]>;
  all(): Promise<ChannelRow[]>;
  insert(row: NewChannelRow): Promise<ChannelRow>;
  update(id: number, patch: Partial<NewChannelRow>): Promise<ChannelRow | undefined>;
  /**
   * Compare-and-set (a read-modify-write by any writer on any node): `patch` is applied only while each stored
   * value named in `expected` still equals it (what the caller read: the key list, the extra headers). Returns
   * the row, or undefined when another write changed one since (or the row is gone): the caller re-reads and
   * decides again.
   */
  updateIf(id: number, expected: ChannelExpected, patch: Partial<NewChannelRow>): Promise<ChannelRow | undefined>;
  /**
   * The health checker's status write: applied only while the row is not manually disabled (2), in the same
   * statement, so an operator's disable committed after the checker read the row is never overwritten.
   * Returns whether it was applied.
   */
  setHealthStatus(id: number, status: number, reason: string, at: number): Promise<boolean>;
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

  async byIds(ids: number[]): Promise<ChannelRow[]> {
    return inChunks(ids, (chunk) => this.db.select().from(channels).where(inArray(channels.id, chunk)).all());
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

  async updateIf(id: number, expected: ChannelExpected, patch: Partial<NewChannelRow>): Promise<ChannelRow | undefined> {
    // json() on both sides: compared as minified JSON text, the form drizzle writes (JSON.stringify).
    const conds: SQL[] = [eq(channels.id, id)];
    if (expected.keys) conds.push(sql`json(${channels.keys}) = json(${JSON.stringify(expected.keys)})`);
    if (expected.headers) conds.push(sql`json(${channels.headers}) = json(${JSON.stringify(expected.headers)})`);
    return this.db.update(channels).set(patch).where(and(...conds)).returning().get();
  }

  async setHealthStatus(id: number, status: number, reason: string, at: number): Promise<boolean> {
    return this.db.update(channels).set({ status, statusReason: reason, updatedAt: at })
      .where(and(eq(channels.id, id), ne(channels.status, MANUALLY_DISABLED))).returning({ id: channels.id }).all().length > 0;
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
