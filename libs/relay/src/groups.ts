/**
 * Groups: the pricing ratio, routing fallbacks and limits shared by every user and key of a group.
 * CRUD for /api/group/ and an in-memory book the request path reads (no DB read per request).
 * A group name with no record (e.g. `default` before anyone defines it) resolves to ratio 1000,
 * no fallbacks and no limits, so existing deployments behave as before.
 */
import { IdInput } from '@gw/core/id-input';
import { Type, type Static } from '@sinclair/typebox';
import { GatewayError, SerialQueue, nowSeconds, type ChangeBus } from '@gw/core';
import type { GroupRow, GroupsStore, NewGroupRow } from '@gw/db';
import { LimitInput, LimitView, limitPatch, limitView } from '@gw/identity';
import { defaultPolicy, type GroupPolicy } from './group-policy';

const Name = Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$', error: 'must be 1-64 letters, digits, _ or -' });
const Ratio = Type.Integer({ minimum: 0, maximum: 1_000_000, description: 'Price ratio in per-mille: 1000 = ×1, 1500 = ×1.5, 0 = free' });
const Fallbacks = Type.Array(Name, { maxItems: 16, description: 'Groups whose channels are tried, in this order, when this group has no healthy channel for the model' });

/** Body of POST /api/group/. */
export const GroupCreate = Type.Object({
  name: Name,
  description: Type.Optional(Type.String({ maxLength: 256 })),
  ratio: Type.Optional(Ratio),
  fallbacks: Type.Optional(Fallbacks),
  ...LimitInput,
});
export type GroupCreate = Static<typeof GroupCreate>;

/** Body of PUT /api/group/: `id` plus any subset of fields (the name is fixed: users and keys refer to it). */
export const GroupUpdate = Type.Composite([Type.Object({ id: IdInput() }), Type.Omit(GroupCreate, ['name'])]);
export type GroupUpdate = Static<typeof GroupUpdate>;

export const GroupView = Type.Object({
  id: Type.Integer(), name: Type.String(), description: Type.String(), ratio: Type.Integer(), fallbacks: Type.Array(Type.String()),
  ...LimitView, created_at: Type.Integer(), updated_at: Type.Integer(),
});
export type GroupView = Static<typeof GroupView>;

export const toGroupView = (g: GroupRow): GroupView => ({
  id: g.id, name: g.name, description: g.description, ratio: g.ratio, fallbacks: g.fallbacks, ...limitView(g),
  created_at: g.createdAt, updated_at: g.updatedAt,
});


const notFound = (id: number) => new GatewayError(404, 'group_not_found', `No group ${id}`, { param: 'id' });

export class GroupService {
  private byName = new Map<string, GroupPolicy>();

  private readonly reloads = new SerialQueue();

  /** Reads every group's policy. */
  static async load(repo: GroupsStore, bus: ChangeBus): Promise<GroupService> {
    const svc = new GroupService(repo, bus);
    await svc.reload();
    // Another node's group writes arrive as 'group.changed' (change feed); this node's own writes reload directly.
    bus.on('group.changed', () => svc.reload());
    return svc;
  }

  /** Starts with no policies (every group ×1): use `load`. */
  private constructor(private readonly repo: GroupsStore, private readonly bus: ChangeBus) {}

  /** Re-reads every policy (a change feed's resync). */
  reloadAll(): Promise<void> {
    return this.reload();
  }

  /** The policy of `name`; an unrecorded group is ×1, no fallbacks, no limits. */
  policy(name: string): GroupPolicy {
    return this.byName.get(name) ?? defaultPolicy(name);
  }

  async list(): Promise<GroupView[]> {
    return (await this.repo.all()).map(toGroupView);
  }

  async get(id: number): Promise<GroupView> {
    const g = await this.repo.byId(id);
    if (!g) throw notFound(id);
    return toGroupView(g);
  }

  async create(input: GroupCreate): Promise<GroupView> {
    if (this.byName.has(input.name)) throw new GatewayError(409, 'group_exists', `Group "${input.name}" already exists`, { param: 'name' });
    const now = nowSeconds();
    // The cache above answers a name this node knows; the unique index, one created meanwhile here or on another node.
    const row = await this.repo.insert({ name: input.name, createdAt: now, updatedAt: now, ...this.patch(input.name, input) });
    if (!row) throw new GatewayError(409, 'group_exists', `Group "${input.name}" already exists`, { param: 'name' });
    await this.committed();
    return toGroupView(row);
  }

  async update(input: GroupUpdate): Promise<GroupView> {
    const g = await this.repo.byId(input.id);
    if (!g) throw notFound(input.id);
    const row = await this.repo.update(g.id, { ...this.patch(g.name, input), updatedAt: nowSeconds() });
    if (!row) throw notFound(input.id); // deleted since the read
    await this.committed();
    return toGroupView(row);
  }

  async delete(id: number): Promise<void> {
    if (!(await this.repo.delete(id))) throw notFound(id);
    await this.committed();
  }

  private patch(name: string, input: Omit<GroupUpdate, 'id'>): Partial<NewGroupRow> {
    const out: Partial<NewGroupRow> = { ...limitPatch(input) };
    if (input.description !== undefined) out.description = input.description.trim();
    if (input.ratio !== undefined) out.ratio = input.ratio;
    if (input.fallbacks !== undefined) {
      // Only the requesting group's own list is followed (not its fallbacks' fallbacks), so no cycle can form;
      // naming itself or twice is still a mistake worth refusing.
      const i = input.fallbacks.findIndex((f, j) => f === name || input.fallbacks!.indexOf(f) !== j);
      if (i >= 0) throw new GatewayError(400, 'invalid_value', `fallbacks: "${input.fallbacks[i]}" is the group itself or repeated`, { param: `fallbacks[${i}]` });
      out.fallbacks = input.fallbacks;
    }
    return out;
  }

  /**
   * After this node's committed write: the reload, whose failure must not turn the answer into an error (the
   * change is made; a client told otherwise retries it). It is logged and the change feed's resync reloads.
   */
  private committed(): Promise<void> {
    return this.bus.refreshed('group.changed', () => this.reload());
  }

  /** Re-reads every policy (groups are few); reloads apply in order, so an older read never wins. */
  private reload(): Promise<void> {
    return this.reloads.run(async () => {
      const next = new Map<string, GroupPolicy>();
      for (const g of await this.repo.all()) {
        next.set(g.name, { name: g.name, ratio: g.ratio, fallbacks: g.fallbacks, rateLimitRpm: g.rateLimitRpm, rateLimitTpm: g.rateLimitTpm, maxConcurrency: g.maxConcurrency, modelLimits: g.modelLimits ?? null });
      }
      this.byName = next;
    });
  }
}
