import { and, count, desc, eq, inArray, ne, sql, type SQL } from 'drizzle-orm';
import type { PgDb } from '../pg/client';
import { channels } from '../schema-pg';
import { type ChannelExpected, ChannelListFilter, ChannelRow, NewChannelRow } from '../repos/channels';
import { inChunks } from '../repos/in-chunks';
import { containsFolded } from './sql';
import { CHANNEL_STATUS } from '../schema/channels';

const MANUALLY_DISABLED = CHANNEL_STATUS.manuallyDisabled;

/** PostgreSQL twin of ../repos/channels.ts (same methods, async). */
export class PgChannelsRepo {
  constructor(private readonly db: PgDb) {}

  async byId(id: number): Promise<ChannelRow | undefined> {
    return (await this.db.select().from(channels).where(eq(channels.id, id)))[0];
  }

  async byIds(ids: number[]): Promise<ChannelRow[]> {
    return inChunks(ids, (chunk) => this.db.select().from(channels).where(inArray(channels.id, chunk)));
  }

  async all(): Promise<ChannelRow[]> {
    return this.db.select().from(channels);
  }

  async insert(row: NewChannelRow): Promise<ChannelRow> {
    return (await this.db.insert(channels).values(row).returning())[0]!;
  }

  async update(id: number, patch: Partial<NewChannelRow>): Promise<ChannelRow | undefined> {
    return (await this.db.update(channels).set(patch).where(eq(channels.id, id)).returning())[0];
  }

  async updateIf(id: number, expected: ChannelExpected, patch: Partial<NewChannelRow>): Promise<ChannelRow | undefined> {
    // jsonb equality: the same entries, whatever the text form.
    const conds: SQL[] = [eq(channels.id, id)];
    if (expected.keys) conds.push(sql`${channels.keys} = ${JSON.stringify(expected.keys)}::jsonb`);
    if (expected.headers) conds.push(sql`${channels.headers} = ${JSON.stringify(expected.headers)}::jsonb`);
    return (await this.db.update(channels).set(patch).where(and(...conds)).returning())[0];
  }

  async setHealthStatus(id: number, status: number, reason: string, at: number): Promise<boolean> {
    return (await this.db.update(channels).set({ status, statusReason: reason, updatedAt: at })
      .where(and(eq(channels.id, id), ne(channels.status, MANUALLY_DISABLED))).returning({ id: channels.id })).length > 0;
  }

  async delete(id: number): Promise<boolean> {
    return (await this.db.delete(channels).where(eq(channels.id, id)).returning({ id: channels.id })).length > 0;
  }

  async deleteMany(ids: number[]): Promise<number[]> {
    if (!ids.length) return [];
    return (await this.db.delete(channels).where(inArray(channels.id, ids)).returning({ id: channels.id })).map((r) => r.id);
  }

  async setStatusByTag(tag: string, status: number, reason: string, at: number): Promise<number[]> {
    return (await this.db.update(channels).set({ status, statusReason: reason, updatedAt: at })
      .where(eq(channels.tag, tag)).returning({ id: channels.id })).map((r) => r.id);
  }

  async list(f: ChannelListFilter): Promise<{ items: ChannelRow[]; total: number }> {
    const conds: SQL[] = [];
    if (f.status !== undefined) conds.push(eq(channels.status, f.status));
    if (f.tag !== undefined) conds.push(eq(channels.tag, f.tag));
    if (f.type !== undefined) conds.push(eq(channels.type, f.type));
    if (f.keyword) conds.push(containsFolded(channels.name, f.keyword));
    // jsonb `?`: the array holds this string as an element (SQLite: json_each ... where value = ?).
    if (f.model !== undefined) conds.push(sql`${channels.models} ? ${f.model}::text`);
    if (f.group !== undefined) conds.push(sql`strpos(',' || ${channels.group} || ',', ',' || ${f.group}::text || ',') > 0`);
    const where = conds.length ? and(...conds) : undefined;
    const [items, [t]] = await Promise.all([
      this.db.select().from(channels).where(where).orderBy(desc(channels.id)).limit(f.limit).offset(f.offset),
      this.db.select({ n: count() }).from(channels).where(where),
    ]);
    return { items, total: t!.n };
  }
}
