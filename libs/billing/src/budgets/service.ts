/**
 * Management of budgets and low-balance thresholds (/api/budget/): validated bodies, views with the
 * current spend, and who may change what. Every write reloads the BudgetBook before it returns, so
 * the next request is admitted against the new budget (other nodes reload on the change feed); a reload that
 * fails after the commit is repaired by the change feed's resync, and the write still answers its result.
 *
 * Who: user budgets are set by admins (for users they may manage); key budgets by the key's owner
 * or such an admin; a low-balance threshold by the user or such an admin.
 */
import { IdInput } from '@gw/core/id-input';
import { Type, type Static } from '@sinclair/typebox';
import { GatewayError, causeChain, nowSeconds, type ChangeBus } from '@gw/core';
import type { AlertOutboxRow, AlertOutboxStore, BudgetRow, BudgetsStore } from '@gw/db';
import type { BudgetBook } from './book';
import { PERIODS } from './period';
import { reachedMask, thresholdsOf } from './thresholds';

const Scope = Type.Union([Type.Literal('user'), Type.Literal('key')], { description: "'user' (all the user's keys together) or 'key'", error: "must be 'user' or 'key'" });
const Period = Type.Union(PERIODS.map((p) => Type.Literal(p)), { description: 'UTC calendar day or calendar month', error: "must be 'daily' or 'monthly'" });
const Amount = Type.Integer({ minimum: 1, maximum: 1e15, description: 'Quota units per period' });

/** Body of PUT /api/budget/: creates or replaces the subject's budget of that period. */
export const BudgetSet = Type.Object({
  scope: Scope,
  subject_id: IdInput({ description: 'The user id (scope user) or the API key id (scope key)' }),
  period: Period,
  limit: Amount,
});
export type BudgetSet = Static<typeof BudgetSet>;

/** Body of PUT /api/budget/low_balance. */
export const LowBalanceSet = Type.Object({
  user_id: Type.Optional(IdInput({ description: 'Admins: another user; default the caller' })),
  threshold: Type.Integer({ minimum: 0, maximum: 1e15, description: 'Alert when a charge takes the balance below this; 0 clears it' }),
});
export type LowBalanceSet = Static<typeof LowBalanceSet>;

export const BudgetView = Type.Object({
  id: Type.Integer(), scope: Type.String(), subject_id: Type.Integer(), user_id: Type.Integer({ description: 'The user, or the key\'s owner' }),
  period: Type.String(), limit: Type.Integer(),
  period_key: Type.String({ description: 'The current period: YYYY-MM-DD (daily) or YYYY-MM (monthly), UTC' }),
  spent: Type.Integer({ description: 'Committed charges in the current period' }),
  pending: Type.Integer({ description: 'Charges recorded, committing within BILLING_FLUSH_MS' }),
  held: Type.Integer({ description: 'Worst cases held by requests in flight' }),
  remaining: Type.Integer({ description: 'limit − spent − pending − held (what a new request may still reserve), at least 0' }),
  resets_at: Type.Integer({ description: 'Unix seconds when the period ends' }),
  alerted: Type.Array(Type.Integer(), { description: 'Thresholds (percent) already announced this period' }),
  created_at: Type.Integer(), updated_at: Type.Integer(),
});
export type BudgetView = Static<typeof BudgetView>;

export const BudgetOverview = Type.Object({
  budgets: Type.Array(BudgetView),
  low_balance_threshold: Type.Union([Type.Integer(), Type.Null()], { description: 'null = no low-balance alert' }),
});

export const AlertView = Type.Object({
  id: Type.Integer(), event_id: Type.String(), type: Type.String(), status: Type.String({ description: 'pending, delivered, failed (attempts exhausted) or skipped (no webhook configured)' }),
  attempts: Type.Integer(), last_error: Type.String(), created_at: Type.Integer(), delivered_at: Type.Union([Type.Integer(), Type.Null()]),
  payload: Type.Unknown({ description: 'The event as delivered' }),
});

/** The acting user, as far as the rules look. */
export interface BudgetActor { id: number; role: number }

export interface BudgetSubjects {
  user(id: number): { id: number; role: number } | undefined;
  /** The owner of an API key; undefined = no such key. */
  keyOwner(keyId: number): number | undefined;
  /** Whether `actor` (an admin) may manage `target` (role rules of the user API). */
  canManage(actor: BudgetActor, target: { id: number; role: number }): boolean;
}

const ADMIN = 10;
const notFound = (what: string, id: number, param: string) => new GatewayError(404, `${what}_not_found`, `No ${what.replace('_', ' ')} ${id}`, { param });

/**
 * The database refused a budget or low-balance row for a subject that is gone (migration 0022 / pg 0025): the key or
 * user was deleted between the check in memory and the write. Such a row would outlive its subject.
 */
const subjectGone = (err: unknown) => causeChain(err).some((e) => typeof e?.message === 'string' && e.message.includes('budget_subject_gone'));

/**
 * Where the views read a budget's live spend in PostgreSQL mode: what every node holds is in the shared
 * store, the committed spend in the row. Absent (SQLite): the book's own numbers.
 */
export type SharedBudgetUsage = (userId: number, budgetId: number) => Promise<{ held: number } | null>;

export class BudgetService {
  constructor(private readonly repo: BudgetsStore, private readonly outbox: AlertOutboxStore, private readonly book: BudgetBook, private readonly subjects: BudgetSubjects,
    private readonly bus: ChangeBus, private readonly shared?: SharedBudgetUsage) {}

  /**
   * After a committed write: the book's reload, whose failure must not turn the answer into an error (the change
   * is made; a client told otherwise retries it). It is logged and the change feed's resync reloads the book.
   */
  private committed(): Promise<void> {
    return this.bus.refreshed('budget.changed', () => this.book.reload());
  }

  /** Creates or replaces a budget; the thresholds already reached under the new limit this period are not announced again. */
  async set(actor: BudgetActor, input: BudgetSet): Promise<BudgetView> {
    return (await this.change(actor, input)).view;
  }

  /**
   * `set`, also saying whose budget it is and the limit the write `replaced` (null: there was none). A key's
   * budget raised makes the key worth more to whoever holds it, so the owner is told (like keyWidening); the
   * limit is compared with the one the write replaced (a compare-and-set), not one read before it, so an owner
   * lowering it meanwhile cannot be overwritten unseen.
   */
  async change(actor: BudgetActor, input: BudgetSet): Promise<{ view: BudgetView; ownerId: number; replaced: number | null }> {
    const owner = this.ownerOf(input.scope, input.subject_id, 'subject_id');
    this.authorize(actor, owner, input.scope === 'user', () => this.unknown(input.scope, input.subject_id, 'subject_id'), input.scope === 'key');
    const now = nowSeconds();
    for (;;) {
      const existing = await this.repo.find(input.scope, input.subject_id, input.period);
      if (!existing) {
        const row = await this.forSubject(() => this.repo.insertIfAbsent({ scope: input.scope, subjectId: input.subject_id, period: input.period, limitAmount: input.limit, createdAt: now, updatedAt: now }),
          () => this.unknown(input.scope, input.subject_id, 'subject_id'));
        if (!row) continue; // a concurrent set (here or on another node) created it first: replace that one
        await this.committed();
        return { view: await this.view(row, owner.id), ownerId: owner.id, replaced: null };
      }
      const alerted = reachedMask(existing.spent, input.limit);
      const row = await this.repo.updateFrom(existing.id, existing, { limitAmount: input.limit, alerted, updatedAt: now });
      if (!row) continue; // changed, charged or cleared since it was read: read it again
      await this.committed();
      return { view: await this.view(row, owner.id), ownerId: owner.id, replaced: existing.limitAmount };
    }
  }

  async clear(actor: BudgetActor, id: number): Promise<void> {
    await this.remove(actor, id);
  }

  /** `clear`, returning the budget as it was removed and its owner (a key's budget removed is reported to the owner). */
  async remove(actor: BudgetActor, id: number): Promise<{ removed: BudgetRow | undefined; ownerId: number }> {
    const row = await this.repo.byId(id);
    if (!row) throw notFound('budget', id, 'id');
    const owner = this.ownerOf(row.scope as 'user' | 'key', row.subjectId, 'id');
    // A key budget of a user the actor may not manage is not listed to it: its id answers 404 like an unknown one.
    this.authorize(actor, owner, row.scope === 'user', () => notFound('budget', id, 'id'), row.scope === 'key');
    const removed = await this.repo.delete(id);
    await this.committed();
    return { removed, ownerId: owner.id };
  }

  async setLowBalance(actor: BudgetActor, input: LowBalanceSet): Promise<{ user_id: number; low_balance_threshold: number | null }> {
    const owner = this.ownerOf('user', input.user_id ?? actor.id, 'user_id');
    this.authorize(actor, owner, false, () => this.unknown('user', owner.id, 'user_id'));
    if (input.threshold > 0) {
      await this.forSubject(() => this.repo.setLowBalance(owner.id, input.threshold, nowSeconds()), () => this.unknown('user', owner.id, 'user_id'));
    }
    else await this.repo.clearLowBalance(owner.id);
    await this.committed();
    return { user_id: owner.id, low_balance_threshold: input.threshold > 0 ? input.threshold : null };
  }

  /**
   * A user's budgets, their keys' budgets and their low-balance threshold. `keyIds` lists the user's keys, asked only
   * once the actor may see them: a refusal then names the budgets, not the key listing it would otherwise come from.
   */
  async overview(actor: BudgetActor, userId: number, keyIds: () => Promise<number[]>): Promise<Static<typeof BudgetOverview>> {
    const owner = this.ownerOf('user', userId, 'user_id');
    if (actor.id !== owner.id) this.authorize(actor, owner, true, () => this.unknown('user', userId, 'user_id'), false, 'see the budgets of');
    const rows = [...await this.repo.list({ scope: 'user', subjectIds: [owner.id] }), ...await this.repo.list({ scope: 'key', subjectIds: await keyIds() })];
    const low = await this.repo.lowBalance(owner.id);
    return { budgets: await Promise.all(rows.map((r) => this.view(r, owner.id))), low_balance_threshold: low?.threshold ?? null };
  }

  /**
   * Every budget (admin), except the key budgets of users the actor may not manage (root's and other admins' keys
   * for an admin below root): naming such a key answers it 404 like an unknown one everywhere else, so no listing
   * shows its id. User budgets are all listed, as users are.
   */
  async list(actor: BudgetActor, filter: { scope?: 'user' | 'key'; subjectId?: number }): Promise<BudgetView[]> {
    const rows = await this.repo.list({ scope: filter.scope, subjectIds: filter.subjectId === undefined ? undefined : [filter.subjectId] });
    const shown: Array<{ row: BudgetRow; ownerId: number }> = [];
    for (const row of rows) {
      const ownerId = row.scope === 'key' ? this.subjects.keyOwner(row.subjectId) ?? 0 : row.subjectId;
      if (row.scope === 'key' && this.keysHidden(actor, ownerId)) continue;
      shown.push({ row, ownerId });
    }
    return Promise.all(shown.map(({ row, ownerId }) => this.view(row, ownerId)));
  }

  /**
   * The alert outbox, newest first. A key budget's alert of a user the actor may not manage (root's and other
   * admins' keys for an admin below root) is listed with `key_id` and `budget_id` null, as the budget listing
   * leaves that budget out: naming either answers it 404 like an unknown id.
   */
  async alerts(actor: BudgetActor, q: { status?: string; offset: number; limit: number }) {
    const r = await this.outbox.list(q);
    return { items: r.items.map((row) => this.redacted(actor, alertView(row))), total: r.total };
  }

  /** True when `actor` may not see the key ids (and key budget ids) of `ownerId`'s keys. */
  private keysHidden(actor: BudgetActor, ownerId: number): boolean {
    if (ownerId === actor.id) return false;
    const owner = this.subjects.user(ownerId);
    return owner !== undefined && !this.subjects.canManage(actor, owner);
  }

  private redacted(actor: BudgetActor, a: ReturnType<typeof alertView>): ReturnType<typeof alertView> {
    const data = (a.payload as { data?: { scope?: unknown; user_id?: unknown } } | null)?.data;
    if (data?.scope !== 'key' || typeof data.user_id !== 'number' || !this.keysHidden(actor, data.user_id)) return a;
    const event = a.payload as { data: Record<string, unknown> };
    return { ...a, payload: { ...event, data: { ...event.data, key_id: null, budget_id: null } } };
  }

  /** A write of a subject's row; the subject deleted since it was checked answers `gone()`, the 404 of an unknown one. */
  private async forSubject<T>(write: () => T | Promise<T>, gone: () => GatewayError): Promise<T> {
    try {
      return await write();
    } catch (err) {
      throw subjectGone(err) ? gone() : err;
    }
  }

  /** The 404 `ownerOf` answers for a subject that does not exist. */
  private unknown(scope: 'user' | 'key', subjectId: number, param: string): GatewayError {
    return scope === 'key' ? notFound('token', subjectId, param) : notFound('user', subjectId, param);
  }

  private ownerOf(scope: 'user' | 'key', subjectId: number, param: string): { id: number; role: number } {
    const userId = scope === 'key' ? this.subjects.keyOwner(subjectId) : subjectId;
    const owner = userId === undefined ? undefined : this.subjects.user(userId);
    if (!owner) throw this.unknown(scope, subjectId, param);
    return owner;
  }

  /**
   * Own keys and own threshold: the owner; anything else (a user budget, even one's own): an admin who may manage
   * the owner. A user budget binds its user, so an admin cannot raise or clear its own (root set it), as it cannot
   * adjust its own balance or change its own account; root, who may manage anyone, can.
   * A plain user asking about another user's key, account or budget gets `hidden()`, the very 404 an unknown one
   * gets: a 403 there would tell it which key ids and user ids exist (admins list users anyway). `keyNamed`: the
   * request names a key, which an admin who may not manage its owner gets as `hidden()` too (as GET /api/token/:id
   * answers it); users and budgets are listed to admins, so their 403 tells nothing new.
   */
  private authorize(actor: BudgetActor, owner: { id: number; role: number }, adminOnly: boolean, hidden: () => GatewayError, keyNamed = false,
    action = 'manage budgets of'): void {
    if (actor.id === owner.id && !adminOnly) return;
    if (actor.role < ADMIN && actor.id !== owner.id) throw hidden();
    if (actor.role < ADMIN) {
      throw new GatewayError(403, 'insufficient_role', adminOnly ? 'Only admins set or clear user budgets' : 'Only admins manage budgets of other users');
    }
    if (!this.subjects.canManage(actor, owner)) {
      if (keyNamed) throw hidden();
      throw new GatewayError(403, 'role_too_high', `You cannot ${action} a user whose role is equal to or above your own`);
    }
  }

  private async view(r: BudgetRow, userId: number): Promise<BudgetView> {
    const u = this.shared ? await this.sharedUsage(r, userId) : this.book.usage(r.id);
    const spent = u?.spent ?? 0;
    const pending = u?.pending ?? 0;
    const held = u?.held ?? 0;
    const current = u !== null && r.periodKey === u.periodKey;
    return {
      id: r.id, scope: r.scope, subject_id: r.subjectId, user_id: userId, period: r.period, limit: r.limitAmount,
      period_key: u?.periodKey ?? r.periodKey, spent, pending, held, remaining: Math.max(0, r.limitAmount - spent - pending - held),
      resets_at: u?.resetsAt ?? 0, alerted: current ? thresholdsOf(r.alerted) : [], created_at: r.createdAt, updated_at: r.updatedAt,
    };
  }

  /** The committed spend from the row (this period's, else none) and what every node holds, from the shared store. */
  private async sharedUsage(r: BudgetRow, userId: number): Promise<ReturnType<BudgetBook['usage']>> {
    const local = this.book.usage(r.id);
    const pk = local?.periodKey ?? r.periodKey;
    const live = await this.shared!(userId, r.id).catch(() => null);
    return { spent: r.periodKey === pk ? r.spent : 0, pending: 0, held: Math.max(0, live?.held ?? 0), periodKey: pk, resetsAt: local?.resetsAt ?? 0 };
  }
}

const alertView = (r: AlertOutboxRow) => ({
  id: r.id, event_id: r.eventId, type: r.type, status: r.status, attempts: r.attempts, last_error: r.lastError,
  created_at: r.createdAt, delivered_at: r.deliveredAt, payload: JSON.parse(r.payload) as unknown,
});
