import { and, count, desc, eq, inArray, like, or, sql, type SQL } from 'drizzle-orm';
import { inChunks } from './in-chunks';
import { GatewayError } from '@gw/core';
import type { Db } from '../client';
import { ROLE, USER_STATUS, users } from '../schema';
import { managedBy, manages } from './actor-guard';

export type UserRow = typeof users.$inferSelect;
export type NewUserRow = typeof users.$inferInsert;

export interface UserListFilter {
  keyword?: string;
  role?: number;
  status?: number;
  group?: string;
  offset: number;
  limit: number;
}

/** Users: storage interface (SQLite UsersRepo, PostgreSQL twin). */
export interface UsersStore {
  byId(id: number): Promise<UserRow | undefined>;
  /** The rows of those ids that exist, in no particular order (the user directory applying a burst of changes at once). */
  byIds(ids: number[]): Promise<UserRow[]>;
  byUsername(username: string): Promise<UserRow | undefined>;
  byEmail(email: string): Promise<UserRow | undefined>;
  /** A user with no opening balance (LedgerStore.createUserWithOpeningBalance credits one: balances change only through the ledger). */
  insert(row: NewUserRow): Promise<UserRow>;
  /**
   * Like `insert`, but a taken username is not an error: undefined, nothing written. Race-free across
   * processes (INSERT … ON CONFLICT (username) DO NOTHING), so nodes starting at once create one root.
   */
  insertIfAbsent(row: NewUserRow): Promise<UserRow | undefined>;
  /**
   * `ifPasswordHash`: write only while the stored password hash is still this one (the one a current password was
   * checked against), else undefined and nothing written: a change authorised by a password replaced meanwhile
   * must not land after the replacement. `actorId` (an admin's change): write only while that user, with its role as
   * the write reads it, manages this one (root, or a role above the user's): checked against rows read before a slow
   * step, the change must land neither on a user promoted meanwhile nor by an actor demoted (or deleted) meanwhile;
   * else undefined and nothing written.
   */
  update(id: number, patch: Partial<NewUserRow>, ifPasswordHash?: string, actorId?: number): Promise<UserRow | undefined>;
  /**
   * `update`, unless it would take the last enabled root out of being one (role below root, or disabled): then
   * 'last_root' and nothing written. Atomic against concurrent calls (SQLite: one transaction in the one writer;
   * PostgreSQL: the enabled roots' rows are locked first), so two roots demoting each other cannot both succeed.
   * `ifPasswordHash` and `actorId` as in `update`.
   */
  updateKeepingRoot(id: number, patch: Partial<NewUserRow>, ifPasswordHash?: string, actorId?: number): Promise<UserRow | undefined | 'last_root'>;
  /** A user other than `exceptId` whose username equals `username` ignoring ASCII case (outside a write: advisory). */
  byUsernameFolded(username: string, exceptId?: number): Promise<UserRow | undefined>;
  /** `actorId` as in `update`: false, nothing deleted, when that user does not (or no longer) manage this one. */
  delete(id: number, actorId?: number): Promise<boolean>;
  count(): Promise<number>;
  list(f: UserListFilter): Promise<{ items: UserRow[]; total: number }>;
}

/**
 * Usernames are unique ignoring ASCII case ("Root" beside "root" would impersonate it). Not a unique index: a
 * database that already holds such a pair must still migrate and start, so the rule is kept by every write that
 * sets a username (create, rename), checking inside its transaction (SQLite: the one writer; PostgreSQL: under
 * one advisory lock, USERNAME_LOCK). Existing pairs stay and keep logging in (login matches the exact name).
 */
export const usernameTaken = (username: string) => new GatewayError(409, 'username_taken', `Username "${username}" is taken`, { param: 'username' });
/** Key of the PostgreSQL transaction-scoped advisory lock every username write takes (and every e-mail write). */
export const USERNAME_LOCK = 'gw-username-write';

/**
 * E-mail addresses are looked up ignoring ASCII case (byEmail), so one address in any case belongs to one user at
 * most: otherwise a reset for it reaches only one of two accounts holding it. The unique index is on the exact
 * spelling, and the service's check reads before the write (requests setting case variants at once all passed
 * it), so, as for usernames and for the same reason (a database holding such a pair must still migrate), every
 * write that sets a new address checks inside its transaction, PostgreSQL under USERNAME_LOCK.
 */
export const emailTaken = () => new GatewayError(409, 'email_taken', 'This e-mail address is already used by another user', { param: 'email' });

/** True when `patch` takes an enabled root user out of being one (demoted, or disabled). */
export function leavesRoot(before: Pick<UserRow, 'role' | 'status'>, patch: Partial<NewUserRow>): boolean {
  const enabledRoot = (r: { role: number; status: number }) => r.role >= ROLE.root && r.status === USER_STATUS.enabled;
  return enabledRoot(before) && !enabledRoot({ role: patch.role ?? before.role, status: patch.status ?? before.status });
}

/** Storage of users; knows SQL, no rules. */
export class UsersRepo implements UsersStore {
  constructor(private readonly db: Db) {}

  async byId(id: number): Promise<UserRow | undefined> {
    return this.db.select().from(users).where(eq(users.id, id)).get();
  }

  async byIds(ids: number[]): Promise<UserRow[]> {
    return inChunks(ids, (chunk) => this.db.select().from(users).where(inArray(users.id, chunk)).all());
  }

  async byUsername(username: string): Promise<UserRow | undefined> {
    return this.db.select().from(users).where(eq(users.username, username)).get();
  }

  async byEmail(email: string): Promise<UserRow | undefined> {
    return this.db.select().from(users).where(sql`lower(${users.email}) = lower(${email})`).get();
  }

  async insert(row: NewUserRow): Promise<UserRow> {
    return this.db.insert(users).values(row).returning().get();
  }

  async insertIfAbsent(row: NewUserRow): Promise<UserRow | undefined> {
    return this.db.insert(users).values(row).onConflictDoNothing({ target: users.username }).returning().get();
  }

  async update(id: number, patch: Partial<NewUserRow>, ifPasswordHash?: string, actorId?: number): Promise<UserRow | undefined> {
    const same = ifPasswordHash === undefined ? undefined : eq(users.passwordHash, ifPasswordHash);
    const managed = actorId === undefined ? undefined : managedBy(users.role, actorId);
    return this.db.update(users).set(patch).where(and(eq(users.id, id), same, managed)).returning().get();
  }

  async byUsernameFolded(username: string, exceptId = 0): Promise<UserRow | undefined> {
    return this.db.select().from(users).where(and(sql`lower(${users.username}) = lower(${username})`, sql`${users.id} <> ${exceptId}`)).get();
  }

  /** Also keeps usernames and e-mail addresses unique ignoring case when the patch sets one (409 username_taken, email_taken, thrown). */
  async updateKeepingRoot(id: number, patch: Partial<NewUserRow>, ifPasswordHash?: string, actorId?: number): Promise<UserRow | undefined | 'last_root'> {
    return this.db.transaction((tx) => {
      const before = tx.select().from(users).where(eq(users.id, id)).get();
      if (!before || (ifPasswordHash !== undefined && before.passwordHash !== ifPasswordHash)) return undefined;
      if (actorId !== undefined && !manages(tx.select({ role: users.role, status: users.status }).from(users).where(eq(users.id, actorId)).get(), before, patch.role)) return undefined;
      if (patch.username !== undefined && patch.username !== before.username
        && tx.select({ id: users.id }).from(users).where(and(sql`lower(${users.username}) = lower(${patch.username})`, sql`${users.id} <> ${id}`)).get()) {
        throw usernameTaken(patch.username);
      }
      if (patch.email && patch.email !== before.email
        && tx.select({ id: users.id }).from(users).where(and(sql`lower(${users.email}) = lower(${patch.email})`, sql`${users.id} <> ${id}`)).get()) {
        throw emailTaken();
      }
      if (leavesRoot(before, patch)) {
        const others = tx.select({ n: count() }).from(users)
          .where(and(sql`${users.role} >= ${ROLE.root}`, eq(users.status, USER_STATUS.enabled), sql`${users.id} <> ${id}`)).get()!.n;
        if (others === 0) return 'last_root';
      }
      return tx.update(users).set(patch).where(eq(users.id, id)).returning().get();
    });
  }

  async delete(id: number, actorId?: number): Promise<boolean> {
    const managed = actorId === undefined ? undefined : managedBy(users.role, actorId);
    return this.db.delete(users).where(and(eq(users.id, id), managed)).returning({ id: users.id }).all().length > 0;
  }

  async count(): Promise<number> {
    return this.db.select({ n: count() }).from(users).get()!.n;
  }

  async list(f: UserListFilter): Promise<{ items: UserRow[]; total: number }> {
    const conds: SQL[] = [];
    if (f.keyword) {
      const k = `%${f.keyword}%`;
      conds.push(or(like(users.username, k), like(users.displayName, k), like(users.email, k))!);
    }
    if (f.role !== undefined) conds.push(eq(users.role, f.role));
    if (f.status !== undefined) conds.push(eq(users.status, f.status));
    if (f.group !== undefined) conds.push(eq(users.group, f.group));
    const where = conds.length ? and(...conds) : undefined;
    const items = this.db.select().from(users).where(where).orderBy(desc(users.id)).limit(f.limit).offset(f.offset).all();
    const total = this.db.select({ n: count() }).from(users).where(where).get()!.n;
    return { items, total };
  }
}
