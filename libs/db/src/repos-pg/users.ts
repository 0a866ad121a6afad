import { and, asc, count, desc, eq, gte, inArray, ne, or, sql, type SQL } from 'drizzle-orm';
import { inChunks } from '../repos/in-chunks';
import type { PgDb } from '../pg/client';
import { users } from '../schema-pg';
import { ROLE, USER_STATUS } from '../schema';
import { emailTaken, leavesRoot, usernameTaken, USERNAME_LOCK, type NewUserRow, type UserListFilter, type UserRow } from '../repos/users';
import { asciiLower, likeFolded } from './sql';
import { managedBy, manages } from '../repos/actor-guard';

/** PostgreSQL twin of ../repos/users.ts (same methods, async). */
export class PgUsersRepo {
  constructor(private readonly db: PgDb) {}

  async byId(id: number): Promise<UserRow | undefined> {
    return (await this.db.select().from(users).where(eq(users.id, id)))[0];
  }

  async byIds(ids: number[]): Promise<UserRow[]> {
    return inChunks(ids, (chunk) => this.db.select().from(users).where(inArray(users.id, chunk)));
  }

  async byUsername(username: string): Promise<UserRow | undefined> {
    return (await this.db.select().from(users).where(eq(users.username, username)))[0];
  }

  async byEmail(email: string): Promise<UserRow | undefined> {
    return (await this.db.select().from(users).where(eq(asciiLower(users.email), asciiLower(email))))[0];
  }

  async insert(row: NewUserRow): Promise<UserRow> {
    return (await this.db.insert(users).values(row).returning())[0]!;
  }

  /** A concurrent insert of the same username waits on the unique index, then does nothing. */
  async insertIfAbsent(row: NewUserRow): Promise<UserRow | undefined> {
    return (await this.db.insert(users).values(row).onConflictDoNothing({ target: users.username }).returning())[0];
  }

  async update(id: number, patch: Partial<NewUserRow>, ifPasswordHash?: string, actorId?: number): Promise<UserRow | undefined> {
    const same = ifPasswordHash === undefined ? undefined : eq(users.passwordHash, ifPasswordHash);
    // The target's role is re-checked on the row as committed when a concurrent write held it (READ COMMITTED): a
    // promotion is seen. The actor's role is read by this statement: a demotion committed before it is seen.
    const managed = actorId === undefined ? undefined : managedBy(users.role, actorId);
    return (await this.db.update(users).set(patch).where(and(eq(users.id, id), same, managed)).returning())[0];
  }

  /**
   * The enabled roots' rows are locked first (with the target's, in id order, so callers cannot deadlock): a concurrent demotion
   * waits, then re-reads them (READ COMMITTED re-checks locked rows), and sees the root the first one removed gone.
   */
  async byUsernameFolded(username: string, exceptId = 0): Promise<UserRow | undefined> {
    return (await this.db.select().from(users).where(and(eq(asciiLower(users.username), asciiLower(username)), ne(users.id, exceptId))))[0];
  }

  /** A rename or a new e-mail address also takes USERNAME_LOCK and keeps usernames and addresses unique ignoring ASCII case (409 username_taken, email_taken, thrown). */
  async updateKeepingRoot(id: number, patch: Partial<NewUserRow>, ifPasswordHash?: string, actorId?: number): Promise<UserRow | undefined | 'last_root'> {
    return this.db.transaction(async (tx) => {
      if (patch.username !== undefined || patch.email) {
        await tx.execute(sql`select pg_advisory_xact_lock(hashtext(${USERNAME_LOCK}))`);
      }
      if (patch.username !== undefined) {
        const [clash] = await tx.select({ id: users.id }).from(users).where(and(eq(asciiLower(users.username), asciiLower(patch.username)), ne(users.id, id)));
        if (clash) throw usernameTaken(patch.username);
      }
      if (patch.email) {
        // Any other user's, in any case (see emailTaken); the user's own address sent again is no clash.
        const [clash] = await tx.select({ id: users.id }).from(users).where(and(eq(asciiLower(users.email), asciiLower(patch.email)), ne(users.id, id)));
        const [own] = clash ? await tx.select({ email: users.email }).from(users).where(eq(users.id, id)) : [];
        if (clash && own?.email !== patch.email) throw emailTaken();
      }
      // The target (and the acting admin) in the same id-ordered lock as the roots: locking them after them could
      // deadlock with a settlement, which locks several users' rows in id order too.
      const mine = actorId === undefined ? eq(users.id, id) : inArray(users.id, [id, actorId]);
      const locked = await tx.select().from(users)
        .where(or(and(gte(users.role, ROLE.root), eq(users.status, USER_STATUS.enabled)), mine)).orderBy(asc(users.id)).for('update');
      const before = locked.find((r) => r.id === id);
      // The row is locked: a password change lands before this read or waits for the write.
      if (!before || (ifPasswordHash !== undefined && before.passwordHash !== ifPasswordHash)) return undefined;
      // The actor's row too: a demotion of it committed before this read is seen, a later one waits for this write.
      if (actorId !== undefined && !manages(locked.find((r) => r.id === actorId), before, patch.role)) return undefined;
      const otherRoots = locked.filter((r) => r.id !== id && r.role >= ROLE.root && r.status === USER_STATUS.enabled);
      if (leavesRoot(before, patch) && otherRoots.length === 0) return 'last_root';
      return (await tx.update(users).set(patch).where(eq(users.id, id)).returning())[0];
    });
  }

  async delete(id: number, actorId?: number): Promise<boolean> {
    const managed = actorId === undefined ? undefined : managedBy(users.role, actorId);
    return (await this.db.delete(users).where(and(eq(users.id, id), managed)).returning({ id: users.id })).length > 0;
  }

  async count(): Promise<number> {
    return (await this.db.select({ n: count() }).from(users))[0]!.n;
  }

  async list(f: UserListFilter): Promise<{ items: UserRow[]; total: number }> {
    const conds: SQL[] = [];
    if (f.keyword) {
      const k = `%${f.keyword}%`;
      conds.push(or(likeFolded(users.username, k), likeFolded(users.displayName, k), likeFolded(users.email, k))!);
    }
    if (f.role !== undefined) conds.push(eq(users.role, f.role));
    if (f.status !== undefined) conds.push(eq(users.status, f.status));
    if (f.group !== undefined) conds.push(eq(users.group, f.group));
    const where = conds.length ? and(...conds) : undefined;
    const [items, [t]] = await Promise.all([
      this.db.select().from(users).where(where).orderBy(desc(users.id)).limit(f.limit).offset(f.offset),
      this.db.select({ n: count() }).from(users).where(where),
    ]);
    return { items, total: t!.n };
  }
}
