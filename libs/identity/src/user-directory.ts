import type { ChangeBus } from '@gw/core';
import type { ModelLimitMap, UserRow, UsersRepo } from '@gw/db';

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

type Listener = (userId: number, account: UserAccount | undefined) => void;

/**
 * In-memory map of every user's status, group and role for the request path. Refreshed on
 * 'user.changed' synchronously; dependants (the API key index) subscribe here so they always see
 * the refreshed account, whatever order bus listeners were registered in.
 */
export class UserDirectory {
  private readonly accounts = new Map<number, UserAccount>();
  private readonly listeners = new Set<Listener>();
  private readonly unsubscribe: () => void;

  constructor(private readonly repo: UsersRepo, bus: ChangeBus) {
    for (const u of repo.list({ offset: 0, limit: Number.MAX_SAFE_INTEGER }).items) this.accounts.set(u.id, toAccount(u));
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

  refresh(userId: number): void {
    const row = this.repo.byId(userId);
    const account = row ? toAccount(row) : undefined;
    if (account) this.accounts.set(userId, account);
    else this.accounts.delete(userId);
    for (const fn of this.listeners) fn(userId, account);
  }

  close(): void {
    this.unsubscribe();
    this.listeners.clear();
  }
}

const toAccount = (u: UserRow): UserAccount => ({
  id: u.id, status: u.status, group: u.group, role: u.role, rateLimitRpm: u.rateLimitRpm, rateLimitTpm: u.rateLimitTpm, maxConcurrency: u.maxConcurrency, modelLimits: u.modelLimits ?? null,
});
