/** Top-up orders: a user buys quota through a provider's hosted checkout; admins see every order. */
import { MAX_INPUT_INTEGER } from '@gw/core/id-input';
import { Elysia, t } from 'elysia';
import { Type } from '@sinclair/typebox';
import { ROLE } from '@gw/db';
import { ok } from '@gw/core';
import { TopupCreatedView, TopupOrderView, toOrderView } from '@gw/payments';
import { authPlugin, caller } from '../plugins/auth';
import type { Services } from '../services';
import { envelope, page, pageQuery, idInput } from './envelope';

const tags = ['topup'];
const statusQuery = t.Optional(t.Union([t.Literal('pending'), t.Literal('paid'), t.Literal('failed'), t.Literal('expired')]));

export const topupRoutes = (s: Services) =>
  new Elysia({ name: 'topup-routes', prefix: '/api/topup' })
    .use(authPlugin(s))
    .post('/', async (ctx) => {
      const o = await s.payments.topups.create(caller(ctx).user.id, ctx.body.amount, ctx.body.provider);
      return ok({ trade_no: o.tradeNo, checkout_url: o.checkoutUrl, amount: o.amount, currency: o.currency, credit: o.credit, status: o.status });
    }, {
      role: 'user',
      body: Type.Object({
        amount: Type.Integer({ minimum: -MAX_INPUT_INTEGER, maximum: MAX_INPUT_INTEGER, description: 'Minor units of TOPUP_CURRENCY (e.g. cents), between TOPUP_MIN and TOPUP_MAX' }),
        provider: Type.String({ maxLength: 32, description: 'providerA (Stripe-compatible) or providerB (Creem-compatible)' }),
      }),
      response: envelope(TopupCreatedView),
      detail: { tags, summary: 'Create a top-up', description: 'Creates a pending order and a checkout at the chosen provider; answers the checkout URL to send the customer to. The balance is credited by the provider\'s signed webhook.' },
    })
    .get('/info', () => {
      const c = s.payments.config;
      return ok({ currency: c.currency, min: c.min, max: c.max, quota_per_unit: c.quotaPerUnit, providers: s.payments.providers });
    }, {
      role: 'user',
      response: envelope(t.Object({
        currency: t.String(), min: t.Integer(), max: t.Integer(),
        quota_per_unit: t.Integer({ description: 'Quota units credited per minor unit paid' }), providers: t.Array(t.String()),
      })),
      detail: { tags, summary: 'Top-up settings', description: 'Currency, minimum and maximum amounts, quota credited per minor unit, and the configured providers.' },
    })
    .get('/self', async (ctx) => {
      const q = ctx.query;
      const r = await s.payments.topups.list({ userId: caller(ctx).user.id, status: q.status, page: q.p ?? 1, pageSize: q.page_size ?? 20 });
      return ok({ ...r, items: r.items.map(toOrderView) });
    }, {
      role: 'user', query: t.Object({ ...pageQuery, status: statusQuery }),
      response: envelope(page(TopupOrderView)), detail: { tags, summary: 'Own top-ups', description: 'The caller\'s top-up orders, newest first.' },
    })
    .get('/', async ({ query: q }) => {
      const r = await s.payments.topups.list({ userId: q.user_id, status: q.status, provider: q.provider, page: q.p ?? 1, pageSize: q.page_size ?? 20 });
      return ok({ ...r, items: r.items.map(toOrderView) });
    }, {
      role: 'admin',
      query: t.Object({ ...pageQuery, user_id: t.Optional(idInput()), status: statusQuery, provider: t.Optional(t.String({ maxLength: 32 })) }),
      response: envelope(page(TopupOrderView)), detail: { tags, summary: 'All top-ups', description: 'Every top-up order (admin; filter by user, status and provider).' },
    })
    .get('/:trade_no', async (ctx) => {
      const me = caller(ctx).user;
      return ok(toOrderView(await s.payments.topups.get(ctx.params.trade_no, { userId: me.id, isAdmin: me.role >= ROLE.admin })));
    }, {
      role: 'user', params: t.Object({ trade_no: t.String({ maxLength: 64 }) }),
      response: envelope(TopupOrderView), detail: { tags, summary: 'Get a top-up', description: 'One order by trade number, for its owner or an admin.' },
    })
    .post('/:trade_no/reinstate', async (ctx) => ok(await s.payments.disputes.reinstate(ctx.params.trade_no, ctx.body.dispute_id, caller(ctx).user.id)), {
      role: 'root', params: t.Object({ trade_no: t.String({ maxLength: 64 }) }),
      body: Type.Object({
        dispute_id: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: "The provider's dispute id; absent: the order's only withdrawn dispute" })),
      }),
      response: envelope(t.Object({
        outcome: t.String({ description: 'dispute_reinstated, noop:dispute already reinstated, or duplicate (this call was made before)' }),
        credited: t.Integer({ description: 'Quota given back to the order\'s user' }),
      })),
      detail: {
        tags, summary: 'Reinstate a won dispute',
        description: 'Root. Records that a dispute was won when the provider sends no event for it (providerB): the quota its withdrawal took back is credited once (ledger kind reinstate), and the dispute stops holding the order\'s money, so a later refund is taken back in full. Use this, not a ledger adjustment, which would leave the dispute holding it. Without dispute_id: the order\'s only withdrawn dispute. 404 dispute_not_found (nothing is recorded: call again once the dispute\'s withdrawal has arrived), 409 dispute_ambiguous, 409 balance_limit (the credit would take the balance above MAX_BALANCE; nothing changes, call again once there is room).',
        responses: { 404: { description: 'order_not_found or dispute_not_found' }, 409: { description: 'dispute_ambiguous: several withdrawn disputes; name one; or balance_limit: no room under MAX_BALANCE' } },
      },
    });
