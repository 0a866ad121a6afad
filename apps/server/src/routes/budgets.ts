/** Budgets (periodic spending caps per user and per key), low-balance thresholds and the alert outbox: thin handlers over BudgetService. */
import { Elysia, t } from 'elysia';
import { ok } from '@gw/core';
import { AlertView, BudgetOverview, BudgetSet, BudgetView, LowBalanceSet } from '@gw/billing';
import type { UserRow } from '@gw/db';
import { named } from '@gw/identity';
import { origin } from '../plugins/origin';
import { authPlugin, caller } from '../plugins/auth';
import type { Services } from '../services';
import { envelope, page, pageQuery, idParams, idInput } from './envelope';

const tags = ['budget'];

const serviceOf = (s: Services) => s.budgets;

/**
 * A key's spending cap raised or removed makes the key worth more to whoever holds it, as `PUT /api/token/` widening
 * does: the owner is told with the same notice (a session alone can do it; lowering or setting a cap says nothing).
 */
async function keyBudgetNotice(s: Services, ctx: Parameters<typeof origin>[0], actor: UserRow, ownerId: number, keyId: number, what: string): Promise<void> {
  const owner = ownerId === actor.id ? actor : await s.users.byId(ownerId);
  if (!owner) return;
  const name = s.apiKeys.byId(keyId)?.name ?? ''; // from memory; a disabled owner's keys are not indexed (no name then)
  s.notices.notify(owner, { kind: 'relay_key_widened', detail: `${named(name, keyId)}; ${what}`, subject: `relay key ${keyId}`, actor, ...origin(ctx) });
}

export const budgetRoutes = (s: Services) =>
  new Elysia({ name: 'budget-routes', prefix: '/api/budget' })
    .use(authPlugin(s))
    .get('/', async (ctx) => ok(await serviceOf(s).list(caller(ctx).user, { scope: ctx.query.scope, subjectId: ctx.query.subject_id })), {
      role: 'admin',
      query: t.Object({
        scope: t.Optional(t.Union([t.Literal('user'), t.Literal('key')], { error: "scope must be 'user' or 'key'" })),
        subject_id: t.Optional(idInput()),
      }),
      response: envelope(t.Array(BudgetView)),
      detail: { tags, summary: 'List budgets', description: 'Every budget with its spend in the current UTC period (admin), optionally of one scope and subject. An admin below root does not see the key budgets of root or other admins (their keys answer it 404).' },
    })
    .get('/self', async (ctx) => {
      const me = caller(ctx).user;
      return ok(await serviceOf(s).overview(me, me.id, async () => (await s.apiKeys.list(me, { offset: 0, limit: Number.MAX_SAFE_INTEGER })).items.map((k) => k.id)));
    }, {
      role: 'user', response: envelope(BudgetOverview),
      detail: { tags, summary: 'My budgets', description: "The caller's user budgets, the budgets of the caller's keys, and the caller's low-balance threshold." },
    })
    .get('/user/:id', async (ctx) => {
      const me = caller(ctx).user;
      return ok(await serviceOf(s).overview(me, ctx.params.id, async () => (await s.apiKeys.list(me, { userId: ctx.params.id, offset: 0, limit: Number.MAX_SAFE_INTEGER })).items.map((k) => k.id)));
    }, {
      role: 'admin', params: idParams, response: envelope(BudgetOverview),
      detail: { tags, summary: "A user's budgets", description: "A user's budgets, their keys' budgets and their low-balance threshold (admin)." },
    })
    .put('/', async (ctx) => {
      const { user } = caller(ctx);
      const r = await serviceOf(s).change(user, ctx.body);
      if (ctx.body.scope === 'key' && r.replaced !== null && ctx.body.limit > r.replaced) {
        await keyBudgetNotice(s, ctx, user, r.ownerId, ctx.body.subject_id, `${ctx.body.period} budget: raised from ${r.replaced} to ${ctx.body.limit}`);
      }
      return ok(r.view);
    }, {
      role: 'user', body: BudgetSet, response: envelope(BudgetView),
      detail: { tags, summary: 'Set a budget', description: "Creates or replaces the `daily` (UTC calendar day) or `monthly` (UTC calendar month) budget of a user (admins) or a key (its owner, or an admin). Requests whose worst case no longer fits get 402 `user_budget_exceeded` / `key_budget_exceeded` with `retry-after` (seconds until the period resets). Alerts at 50, 80 and 100 % are announced once per period; thresholds already reached under a new limit are not announced again." },
    })
    .delete('/:id', async (ctx) => {
      const { user } = caller(ctx);
      const { removed, ownerId } = await serviceOf(s).remove(user, ctx.params.id);
      if (removed?.scope === 'key') {
        await keyBudgetNotice(s, ctx, user, ownerId, removed.subjectId, `${removed.period} budget removed (no ${removed.period} limit)`);
      }
      return ok(null);
    }, { role: 'user', params: idParams, response: envelope(t.Null()), detail: { tags, summary: 'Clear a budget', description: 'Removes a budget (same rights as setting it); the next request is admitted without it. A key budget of root or another admin answers an admin below root 404 `budget_not_found`, as an unknown id.' } })
    .put('/low_balance', async (ctx) => ok(await serviceOf(s).setLowBalance(caller(ctx).user, ctx.body)), {
      role: 'user', body: LowBalanceSet, response: envelope(t.Object({ user_id: t.Integer(), low_balance_threshold: t.Union([t.Integer(), t.Null()]) })),
      detail: { tags, summary: 'Set the low-balance alert', description: 'An alert (`balance.low`) is sent when a charge takes the balance from at least `threshold` to below it; 0 clears. Users set their own, admins anyone\'s they may manage (`user_id`).' },
    })
    .get('/alerts', async (ctx) => {
      const { query } = ctx;
      const p = query.p ?? 1;
      const size = query.page_size ?? 20;
      return ok({ ...await serviceOf(s).alerts(caller(ctx).user, { status: query.status, offset: (p - 1) * size, limit: size }), page: p, page_size: size });
    }, {
      role: 'admin',
      query: t.Object({ ...pageQuery, status: t.Optional(t.Union(['pending', 'delivered', 'failed', 'skipped'].map((x) => t.Literal(x)), { error: 'status must be pending, delivered, failed or skipped' })) }),
      response: envelope(page(AlertView)),
      detail: { tags, summary: 'Alert outbox', description: 'Alerts written by charges, newest first, with their delivery state. An admin below root gets `key_id` and `budget_id` null in the alerts of key budgets of root and other admins.' },
    });
