/**
 * Relay API keys (`sk-…`): CRUD for /api/token/ and the in-memory index the relay authenticates
 * against (no DB read per request). Keys are stored as SHA-256 + a short prefix and shown once.
 */
import { IdInput, MAX_INPUT_INTEGER } from '@gw/core/id-input';
import { Type, type Static } from '@sinclair/typebox';
import { BatchedRefresh, GatewayError, inexactFields, nowSeconds, randomToken, sha256Hex, type ChangeBus } from '@gw/core';
import { API_KEY_STATUS, ROLE, isForeignKeyViolation, type ApiKeyRow, type ApiKeysStore, type ModelLimitMap, type NewApiKeyRow, type UserRow, type UsersStore } from '@gw/db';
import { isIpOrCidr } from './ip-allow';
import { keyWidening } from './key-widening';
import { KeyOwners } from './key-owners';
import { LimitInput, LimitView, limitPatch, limitView } from './limit-fields';
import type { UserDirectory } from './user-directory';
import { canManage, type Actor } from './users';


/** What the relay needs of a key. `status`/`expiresAt` are kept so it can say why a key is refused. */
export interface ApiKeyRecord {
  id: number; userId: number; name: string; status: number; expiresAt: number | null;
  unlimitedQuota: boolean; remainQuota: number; usedQuota: number; models: string[] | null; allowIps: string[] | null;
  group: string | null; rateLimitRpm: number; rateLimitTpm: number; maxConcurrency: number; modelLimits: ModelLimitMap | null;
}

const Models = Type.Union([Type.Array(Type.String({ minLength: 1, maxLength: 200 }), { maxItems: 1000 }), Type.Null()], { description: 'Model allow-list; null or [] = any model of the group' });
const AllowIps = Type.Union([Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 256 }), Type.Null()], { description: 'IP/CIDR allow-list (IPv4 and IPv6); null or [] = any address' });
const Group = Type.Union([Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$', error: 'must be 1-64 letters, digits, _ or -' }), Type.Null()], { description: "Routing group; null = the owner's group" });
const ExpiresAt = Type.Union([Type.Integer({ minimum: 1, maximum: MAX_INPUT_INTEGER }), Type.Null()], { description: 'Unix seconds in the future; null = never' });
const Quota = Type.Integer({ minimum: 0, maximum: 1e15 });

/** Body of POST /api/token/. */
export const ApiKeyCreate = Type.Object({
  user_id: Type.Optional(IdInput({ description: 'Admins: create for this user' })),
  name: Type.String({ minLength: 1, maxLength: 64 }),
  expires_at: Type.Optional(ExpiresAt),
  unlimited_quota: Type.Optional(Type.Boolean({ default: true })),
  remain_quota: Type.Optional(Quota),
  models: Type.Optional(Models),
  allow_ips: Type.Optional(AllowIps),
  group: Type.Optional(Group),
  ...LimitInput,
});
export type ApiKeyCreate = Static<typeof ApiKeyCreate>;

/** Body of PUT /api/token/: `id` plus any subset of fields. */
export const ApiKeyUpdate = Type.Object({
  id: IdInput(),
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  status: Type.Optional(Type.Union([Type.Literal(1), Type.Literal(2)], { description: '1 enabled, 2 disabled', error: 'must be 1 (enabled) or 2 (disabled)' })),
  expires_at: Type.Optional(ExpiresAt),
  unlimited_quota: Type.Optional(Type.Boolean()),
  remain_quota: Type.Optional(Quota),
  models: Type.Optional(Models),
  allow_ips: Type.Optional(AllowIps),
  group: Type.Optional(Group),
  ...LimitInput,
});
export type ApiKeyUpdate = Static<typeof ApiKeyUpdate>;

export const ApiKeyView = Type.Object({
  id: Type.Integer(), user_id: Type.Integer(), name: Type.String(),
  prefix: Type.String({ description: 'First characters of the key, for recognition' }),
  status: Type.Integer({ description: '1 enabled, 2 disabled' }),
  expires_at: Type.Union([Type.Integer(), Type.Null()]),
  unlimited_quota: Type.Boolean(), remain_quota: Type.Integer(), used_quota: Type.Integer(),
  models: Type.Union([Type.Array(Type.String()), Type.Null()]),
  allow_ips: Type.Union([Type.Array(Type.String()), Type.Null()]),
  group: Type.Union([Type.String(), Type.Null()]),
  ...LimitView,
  created_at: Type.Integer(), updated_at: Type.Integer(), last_used_at: Type.Union([Type.Integer(), Type.Null()]),
  inexact: Type.Optional(Type.Array(Type.String(), {
    description: 'Only when a money or counter field of this row is stored beyond 2^53 − 1 (written outside the gateway): those fields, whose value above is the database value already rounded. Requests on such a balance are refused (402 balance_inexact).',
  })),
});
export type ApiKeyView = Static<typeof ApiKeyView>;

export const toApiKeyView = (r: ApiKeyRow): ApiKeyView => {
  const v: ApiKeyView = {
    id: r.id, user_id: r.userId, name: r.name, prefix: r.prefix, status: r.status, expires_at: r.expiresAt,
    unlimited_quota: r.unlimitedQuota, remain_quota: r.remainQuota, used_quota: r.usedQuota, models: r.models,
    allow_ips: r.allowIps, group: r.group, ...limitView(r), created_at: r.createdAt,
    updated_at: r.updatedAt, last_used_at: r.lastUsedAt,
  };
  const inexact = inexactFields({ remain_quota: r.remainQuota, used_quota: r.usedQuota });
  if (inexact) v.inexact = inexact;
  return v;
};

const toRecord = (r: ApiKeyRow): ApiKeyRecord => ({
  id: r.id, userId: r.userId, name: r.name, status: r.status, expiresAt: r.expiresAt, unlimitedQuota: r.unlimitedQuota,
  remainQuota: r.remainQuota, usedQuota: r.usedQuota, models: r.models, allowIps: r.allowIps, group: r.group, rateLimitRpm: r.rateLimitRpm,
  rateLimitTpm: r.rateLimitTpm, maxConcurrency: r.maxConcurrency, modelLimits: r.modelLimits ?? null,
});

const notFound = (id: number) => new GatewayError(404, 'token_not_found', `No API key ${id}`, { param: 'id' });
const userNotFound = (id: number) => new GatewayError(404, 'user_not_found', `No user ${id}`, { param: 'user_id' });
const bad = (param: string, message: string) => new GatewayError(400, 'invalid_value', message, { param });

export class ApiKeyService {
  private readonly byHash = new Map<string, ApiKeyRecord>();
  /** Owners whose keys are left out of the index (disabled or deleted). */
  private readonly excludedUsers = new Set<number>();
  /**
   * Every stored key by id: its owner (those left out of the index included) and its hash in `byHash`; by owner,
   * so disabling a user drops its keys without scanning every key.
   */
  private readonly owners = new KeyOwners();
  private readonly unsubs: Array<() => void> = [];
  /**
   * Keys changed while a re-read runs are re-read together, in one query, by the next (another node revoking
   * 10,000 keys cost 10,000 round trips here, one after another); a full reload takes the ids waiting with it.
   */
  private readonly refreshes = new BatchedRefresh<number>((ids) => (ids === null ? this.applyAll() : this.apply(ids)));
  /**
   * Reads are numbered when they start; a key's entry takes a row only from a read that started after the
   * one it last took. A user's keys are re-read (re-enable) apart from the per-key queue, and with a pool of
   * PostgreSQL connections that older read can answer last: it must not bring back a key revoked since.
   */
  private readSeq = 0;
  private readonly reenables = new BatchedRefresh<number>((userIds) => this.reindexUsers(userIds ?? []));
  private readonly keySeq = new Map<number, number>();

  /**
   * Builds the index from every stored key, then follows 'apikey.changed' and the directory.
   * `maxKeysPerUser`: keys one owner may hold (0 = unlimited), so no account can grow the key index without bound.
   */
  static async load(repo: ApiKeysStore, users: UsersStore, directory: UserDirectory, bus: ChangeBus,
    limits: { maxKeysPerUser: number } = { maxKeysPerUser: 100 }): Promise<ApiKeyService> {
    const svc = new ApiKeyService(repo, users, directory, bus, limits);
    for (const row of await repo.all()) await svc.index(row);
    return svc;
  }

  /** Starts with an empty index: use `load`. */
  private constructor(private readonly repo: ApiKeysStore, private readonly users: UsersStore, private readonly directory: UserDirectory, private readonly bus: ChangeBus,
    private readonly limits: { maxKeysPerUser: number }) {
    this.unsubs.push(bus.on('apikey.changed', ({ keyId }) => this.refreshKey(keyId)));
    this.unsubs.push(directory.subscribe((userId, account) => {
      if (!account) this.forgetUser(userId);
      return this.refreshUser(userId, account?.status === 1);
    }));
  }

  /** O(1), no DB. undefined = unknown key, or its owner is disabled/deleted. Check status and expiry yourself. */
  lookup(plainKey: string): ApiKeyRecord | undefined {
    return this.byHash.get(sha256Hex(plainKey));
  }

  /** The owner an actor works on: itself, or (admins) `userId` within the role rules. */
  /** O(1), no DB: the indexed key with this id (undefined = deleted, or its owner is disabled/deleted). */
  byId(keyId: number): ApiKeyRecord | undefined {
    const hash = this.owners.hashOf(keyId);
    return hash ? this.byHash.get(hash) : undefined;
  }

  /**
   * O(1), no DB: the owner of a stored key, also while that owner is disabled (byId then answers undefined).
   * For rules about whose key an id is; undefined = no such key (deleted, or never existed).
   */
  ownerOf(keyId: number): number | undefined {
    return this.owners.get(keyId);
  }

  async resolveOwner(actor: UserRow, userId?: number): Promise<UserRow> {
    if (userId === undefined || userId === actor.id) return actor;
    if (actor.role < ROLE.admin) throw new GatewayError(403, 'insufficient_role', 'Only admins can manage keys of other users', { param: 'user_id' });
    const owner = await this.users.byId(userId);
    if (!owner) throw userNotFound(userId);
    if (!canManage(actor, owner)) throw new GatewayError(403, 'role_too_high', 'You cannot manage keys of a user whose role is equal to or above your own', { param: 'user_id' });
    return owner;
  }

  async create(actor: UserRow, input: ApiKeyCreate): Promise<{ key: string; view: ApiKeyView; owner: UserRow }> {
    const owner = await this.resolveOwner(actor, input.user_id);
    const max = this.limits.maxKeysPerUser;
    const now = nowSeconds();
    const key = `sk-${randomToken(48)}`;
    const row = await this.repo.insertBelow({
      userId: owner.id, name: input.name.trim() || input.name, keyHash: sha256Hex(key), prefix: key.slice(0, 8),
      status: API_KEY_STATUS.enabled, ...this.checked(actor, owner, input, now), createdAt: now, updatedAt: now,
    }, max).catch((err: unknown) => {
      // The owner was deleted since it was read: the 404 a request after the delete gets, not a 500.
      throw isForeignKeyViolation(err, 'api_keys_user_id_users_id_fk') ? userNotFound(owner.id) : err;
    });
    if (!row) throw new GatewayError(409, 'too_many_keys', `A user may hold at most ${max} API keys; delete unused ones first`, { param: 'user_id' });
    await this.afterWrite(row.id);
    return { key, view: toApiKeyView(row), owner };
  }

  async list(actor: UserRow, q: { userId?: number; keyword?: string; status?: number; offset: number; limit: number }): Promise<{ items: ApiKeyView[]; total: number }> {
    const owner = await this.resolveOwner(actor, q.userId);
    const r = await this.repo.list({ userId: owner.id, keyword: q.keyword, status: q.status, offset: q.offset, limit: q.limit });
    return { items: r.items.map(toApiKeyView), total: r.total };
  }

  async get(actor: UserRow, id: number): Promise<ApiKeyView> {
    return toApiKeyView((await this.owned(actor, id)).row);
  }

  async update(actor: UserRow, input: ApiKeyUpdate): Promise<ApiKeyView> {
    return (await this.change(actor, input)).view;
  }

  /**
   * `update`, also saying whose key it is, whether it was `revived` (disabled or expired before, usable now) and
   * how it was `widened` (see keyWidening). Bringing back a key the owner retired is as good as a new key to
   * whoever holds it, and widening one makes it worth more, so both are reported to the owner.
   */
  async change(actor: UserRow, input: ApiKeyUpdate): Promise<{ view: ApiKeyView; owner: UserRow; revived: boolean; widened: string[] }> {
    const { row, owner } = await this.owned(actor, input.id);
    const now = nowSeconds();
    const patch: Partial<NewApiKeyRow> = { ...this.checked(actor, owner, input, now), updatedAt: now };
    if (input.name !== undefined) patch.name = input.name.trim() || input.name;
    if (input.status !== undefined) patch.status = input.status;
    // Compared with the row as this write replaced it, not as `owned` read it: the owner may narrow or disable
    // the key in between, and a write restoring the wider value or the status is then what gives it more reach.
    const written = await this.repo.updateReplacing(row.id, patch);
    if (!written) throw notFound(row.id);
    const { before, after: updated } = written;
    await this.afterWrite(row.id);
    const usable = (k: Pick<ApiKeyRow, 'status' | 'expiresAt'>) => k.status === API_KEY_STATUS.enabled && (k.expiresAt === null || k.expiresAt > now);
    // The replaced row against the fields this request wrote, not the row read back: a concurrent refund raising
    // remain_quota after this write is not this request's widening.
    const widened = keyWidening(before, { ...before, ...patch }, owner.group);
    return { view: toApiKeyView(updated), owner, revived: !usable(before) && usable(updated), widened };
  }

  async delete(actor: UserRow, id: number): Promise<void> {
    const { row } = await this.owned(actor, id);
    await this.repo.delete(row.id);
    await this.afterWrite(row.id);
  }

  close(): void {
    for (const u of this.unsubs) u();
  }

  /**
   * A key the actor may see: its own, or (admins) one of a user it may manage. Any other is the 404 an unknown id
   * gets, for admins too: a 403 for a root's or another admin's key would tell which key ids exist and that they
   * belong to someone above the caller.
   */
  private async owned(actor: UserRow, id: number): Promise<{ row: ApiKeyRow; owner: UserRow }> {
    const row = await this.repo.byId(id);
    if (!row) throw notFound(id);
    if (row.userId === actor.id) return { row, owner: actor };
    if (actor.role < ROLE.admin) throw notFound(id);
    const owner = await this.users.byId(row.userId);
    if (!owner || !canManage(actor, owner)) throw notFound(id);
    return { row, owner };
  }

  /** Validates the optional fields shared by create and update into column values. */
  private checked(actor: UserRow, owner: UserRow, input: Partial<ApiKeyCreate>, now: number): Partial<NewApiKeyRow> {
    const out: Partial<NewApiKeyRow> = {};
    if (input.expires_at !== undefined) {
      if (input.expires_at !== null && input.expires_at <= now) throw new GatewayError(400, 'out_of_range', 'expires_at must be in the future (unix seconds)', { param: 'expires_at' });
      out.expiresAt = input.expires_at;
    }
    if (input.unlimited_quota !== undefined) out.unlimitedQuota = input.unlimited_quota;
    if (input.remain_quota !== undefined) out.remainQuota = input.remain_quota;
    Object.assign(out, limitPatch(input));
    if (input.models !== undefined) {
      const models = input.models === null ? [] : [...new Set(input.models.map((m) => m.trim()))];
      if (models.some((m) => m === '')) throw bad('models', 'models: names must not be blank');
      out.models = models.length ? models : null;
    }
    if (input.allow_ips !== undefined) {
      const ips = (input.allow_ips ?? []).map((s) => s.trim());
      const i = ips.findIndex((s) => !isIpOrCidr(s));
      if (i >= 0) throw bad(`allow_ips[${i}]`, `allow_ips: "${ips[i]}" is not an IP address or CIDR range`);
      out.allowIps = ips.length ? [...new Set(ips)] : null;
    }
    if (input.group !== undefined) {
      if (input.group !== null && input.group !== owner.group && actor.role < ROLE.admin) {
        throw new GatewayError(403, 'group_not_allowed', `You can only use your own group ("${owner.group}")`, { param: 'group' });
      }
      // The owner's own group is stored as "the owner's" (null): the key moves with its owner, so moving a user out
      // of a group (a discount, a private channel) cannot leave their keys in it.
      out.group = input.group === owner.group ? null : input.group;
    }
    return out;
  }

  private afterWrite(keyId: number): Promise<void> {
    // This index refreshes through its own bus listener, as does every other cache of keys.
    return this.bus.committed('apikey.changed', { keyId });
  }

  /** Re-reads one key (see refreshes); the old entry stays served until the new row is in hand, then is swapped at once. */
  private refreshKey(keyId: number): Promise<void> {
    return this.refreshes.run(keyId);
  }

  /** A batch of keys: one read, then each id's entry replaced (or dropped) unless a newer read already set it. */
  private async apply(ids: number[]): Promise<void> {
    const seq = ++this.readSeq;
    const rows = new Map((await this.repo.byIds(ids)).map((r) => [r.id, r]));
    await this.knowOwners(rows.values());
    for (const id of ids) {
      if (!this.fresher(id, seq)) continue;
      this.unindex(id);
      const row = rows.get(id);
      if (row) this.indexKnown(row);
      else this.owners.forgetKey(id);
    }
  }

  /** Owners not in the directory (written without an event, e.g. by a script) are read, all in one batch. */
  private async knowOwners(rows: Iterable<ApiKeyRow>): Promise<void> {
    const unknown = new Set<number>();
    for (const row of rows) if (!this.directory.get(row.userId)) unknown.add(row.userId);
    await Promise.all([...unknown].map((userId) => this.directory.refresh(userId)));
  }

  /**
   * Re-enabled users' keys, read back into the index: users re-enabled while a read runs are read together by the
   * next (a bulk re-enable cost one read per user). A key's entry is still taken only from a read newer than the
   * one it holds, and only while its owner is enabled (indexKnown asks the directory), so a disable or revocation
   * heard meanwhile is never undone.
   */
  private async reindexUsers(userIds: number[]): Promise<void> {
    const seq = ++this.readSeq;
    const rows = await this.repo.byUsers(userIds);
    await this.knowOwners(rows);
    for (const row of rows) if (this.fresher(row.id, seq)) this.indexKnown(row);
  }

  /** Whether a read numbered `seq` is newer than what the key's entry holds (and records it if so). */
  private fresher(keyId: number, seq: number): boolean {
    if ((this.keySeq.get(keyId) ?? 0) > seq) return false;
    this.keySeq.set(keyId, seq);
    return true;
  }

  /**
   * Rebuilds the index from every stored key (a change feed's resync). Read first, then applied in one
   * synchronous step, so a request sees the old index or the new one, never a half-built one. Numbered like
   * every read: a key read more recently than this reload (its owner re-enabled meanwhile) keeps that entry.
   */
  reloadAll(): Promise<void> {
    return this.refreshes.run(null);
  }

  private async applyAll(): Promise<void> {
    const seq = ++this.readSeq;
    const rows = await this.repo.all();
    await this.knowOwners(rows);
    const present = new Set(rows.map((r) => r.id));
    // Every known id, indexed or not (a disabled owner's keys are known only to `owners`).
    for (const id of this.owners.keyIds()) {
      if (!present.has(id) && (this.keySeq.get(id) ?? 0) <= seq) {
        this.unindex(id);
        this.owners.forgetKey(id);
      }
    }
    this.excludedUsers.clear();
    for (const row of rows) {
      if (!this.fresher(row.id, seq)) continue;
      this.unindex(row.id);
      this.indexKnown(row);
    }
  }

  /** Takes the key out of the relay's index; its owner stays known. */
  private unindex(keyId: number): void {
    const hash = this.owners.hashOf(keyId);
    if (hash === undefined) return;
    this.byHash.delete(hash);
    this.owners.setHash(keyId, null);
  }

  /** The user is deleted: its keys are gone from the index and from the owners' table. */
  private forgetUser(userId: number): void {
    for (const id of this.owners.keysOf(userId)) this.unindex(id);
    this.owners.forgetUser(userId);
  }

  /** Runs on every 'user.changed' (profile and status writes; charges emit balance.changed instead): touches the DB only when enabled-ness flips. */
  private async refreshUser(userId: number, enabled: boolean): Promise<void> {
    if (enabled !== this.excludedUsers.has(userId)) return;
    if (enabled) {
      this.excludedUsers.delete(userId);
      return this.reenables.run(userId);
    }
    this.excludedUsers.add(userId);
    for (const id of this.owners.keysOf(userId)) this.unindex(id);
  }

  private async index(row: ApiKeyRow): Promise<void> {
    // A user written without an event (e.g. inserted by a script) is read once rather than treated as unknown.
    if (!this.directory.get(row.userId)) await this.directory.refresh(row.userId);
    this.indexKnown(row);
  }

  /** index() once the owner is in the directory (no I/O). */
  private indexKnown(row: ApiKeyRow): void {
    this.owners.set(row.id, row.userId);
    if (this.directory.get(row.userId)?.status !== 1) {
      this.excludedUsers.add(row.userId);
      return;
    }
    this.byHash.set(row.keyHash, toRecord(row));
    this.owners.setHash(row.id, row.keyHash);
  }
}
