import { BatchedRefresh, type ChangeBus } from '@gw/core';
import type { ModelLimitMap, UserRow, UsersStore } from '@gw/db';

/** What the request path needs to know about a user (balances live in the billing QuotaService). */
export interface UserAccount {
  id: number;
  status: number;
  group: string;
  role: number;
  /** Per-user limits (0 = unlimited). */
  rateLimitRpm: number;
  rateLimitTpm: number;
  maxConcurrency: number;
  /** Per-model limits; null = none. */
  modelLimits: ModelLimitMap | null;
}

type Listener = (userId: number, account: UserAccount | undefined) => void | Promise<void>;

/**
 * In-memory map of every user's status, group and role for the request path. Refreshed on
 * 'user.changed' (the bus waits for the refresh, so a write's answer follows it); dependants (the API
 * key index) subscribe here so they always see the refreshed account, whatever order bus listeners
 * were registered in. Build it with `UserDirectory.load`.
 */
export class UserDirectory {
  private readonly accounts = new Map<number, UserAccount>();
  private readonly listeners = new Set<Listener>();
  private readonly unsubscribe: () => void;
  /**
   * Users changed while a re-read runs are re-read together, in one query, by the next (another node disabling
   * 10,000 users cost 10,000 round trips here, one after another); a full reload takes the ids waiting with it.
   */
  private readonly refreshes = new BatchedRefresh<number>((ids) => (ids === null ? this.applyAll() : this.apply(ids)));

  /** Reads every user, then follows 'user.changed'. */
  static async load(repo: UsersStore, bus: ChangeBus): Promise<UserDirectory> {
    return new UserDirectory(repo, bus, (await repo.list({ offset: 0, limit: Number.MAX_SAFE_INTEGER })).items);
  }

  constructor(private readonly repo: UsersStore, bus: ChangeBus, rows: UserRow[]) {
    for (const u of rows) this.accounts.set(u.id, toAccount(u));
    this.unsubscribe = bus.on('user.changed', ({ userId }) => this.refresh(userId));
  }

  /** undefined = no such user (deleted or never existed). */
  get(userId: number): UserAccount | undefined {
    return this.accounts.get(userId);
  }

  /** Called after a user's entry was refreshed (account undefined = deleted). */
  subscribe(fn: Listener): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** Re-reads one user; resolves once the entry and every subscriber are up to date (see refreshes). */
  refresh(userId: number): Promise<void> {
    return this.refreshes.run(userId);
  }

  /**
   * Re-reads every user (a change feed's resync: notifications sent while nobody listened are lost).
   * Subscribers hear only the users that were added, removed or changed, so the key index re-reads
   * nothing for users whose enabled-ness stayed the same.
   */
  reloadAll(): Promise<void> {
    return this.refreshes.run(null);
  }

  /** A batch: every id asked for is set (or dropped) from one read, then each subscriber hears each, in order. */
  private async apply(ids: number[]): Promise<void> {
    const rows = new Map((await this.repo.byIds(ids)).map((r) => [r.id, r]));
    const changed: Array<[number, UserAccount | undefined]> = [];
    for (const id of ids) {
      const row = rows.get(id);
      const account = row ? toAccount(row) : undefined;
      if (account) this.accounts.set(id, account);
      else this.accounts.delete(id);
      changed.push([id, account]);
    }
    await this.tell(changed);
  }

  private async applyAll(): Promise<void> {
    const rows = (await this.repo.list({ offset: 0, limit: Number.MAX_SAFE_INTEGER })).items;
    const seen = new Set<number>();
    const changed: Array<[number, UserAccount | undefined]> = [];
    for (const row of rows) {
      const account = toAccount(row);
      seen.add(row.id);
      const old = this.accounts.get(row.id);
      if (!old || JSON.stringify(old) !== JSON.stringify(account)) changed.push([row.id, account]);
      this.accounts.set(row.id, account);
    }
    for (const id of [...this.accounts.keys()]) {
      if (seen.has(id)) continue;
      this.accounts.delete(id);
      changed.push([id, undefined]);
    }
    await this.tell(changed);
  }

  /**
   * Each subscriber hears every user of a batch at once (the key index re-reads the keys of all the users a batch
   * re-enabled in one query), the subscribers one after another, as registered.
   */
  private async tell(changed: Array<[number, UserAccount | undefined]>): Promise<void> {
    for (const fn of this.listeners) await Promise.all(changed.map(([id, account]) => fn(id, account)));
  }

  close(): void {
    this.unsubscribe();
    this.listeners.clear();
  }
}

const toAccount = (u: UserRow): UserAccount => ({
  id: u.id, status: u.status, group: u.group, role: u.role, rateLimitRpm: u.rateLimitRpm, rateLimitTpm: u.rateLimitTpm, maxConcurrency: u.maxConcurrency, modelLimits: u.modelLimits ?? null,
});
