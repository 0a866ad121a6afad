/** The ledger of every balance change: users read their own, admins read anyone's and adjust by hand. */
import { IdInput } from '@gw/core/id-input';
import { Elysia, t } from 'elysia';
import { Type } from '@sinclair/typebox';
import { ok } from '@gw/core';
import { LedgerEntryView, toLedgerView } from '@gw/payments';
import { authPlugin, caller } from '../plugins/auth';
import type { Services } from '../services';
import { envelope, page, pageQuery, idInput } from './envelope';

const tags = ['ledger'];
const kindQuery = t.Optional(t.Union([t.Literal('topup'), t.Literal('charge'), t.Literal('refund'), t.Literal('adjust'), t.Literal('redeem'), t.Literal('clawback'), t.Literal('reinstate')]));

export const ledgerRoutes = (s: Services) =>
  new Elysia({ name: 'ledger-routes', prefix: '/api/ledger' })
    .use(authPlugin(s))
    .get('/self', async (ctx) => {
      const p = ctx.query.p ?? 1;
      const size = ctx.query.page_size ?? 20;
      const me = caller(ctx).user.id;
      const r = await s.historyReads.run(me, () => s.historyListings.ledgerList({ userId: me, kind: ctx.query.kind, offset: (p - 1) * size, limit: size }));
      return ok({ items: r.items.map(toLedgerView), total: r.total, page: p, page_size: size });
    }, {
      role: 'user', query: t.Object({ ...pageQuery, kind: kindQuery }),
      response: envelope(page(LedgerEntryView)), detail: { tags, summary: 'Own ledger', description: 'The caller\'s balance changes, newest first (paged; filter by kind: topup, charge, refund, adjust, redeem, clawback (money taken back by a refund or dispute of a payment), reinstate (given back when a dispute is won)).' },
    })
    .get('/', async (ctx) => {
      const query = ctx.query;
      const p = query.p ?? 1;
      const size = query.page_size ?? 20;
      const r = await s.historyReads.run(caller(ctx).user.id, () => s.historyListings.ledgerList({ userId: query.user_id, kind: query.kind, offset: (p - 1) * size, limit: size }));
      return ok({ items: r.items.map(toLedgerView), total: r.total, page: p, page_size: size });
    }, {
      role: 'admin', query: t.Object({ ...pageQuery, user_id: t.Optional(idInput()), kind: kindQuery }),
      response: envelope(page(LedgerEntryView)), detail: { tags, summary: 'All ledger entries', description: 'Every balance change of every user (admin; filter by user and kind). A balance is always the sum of its entries.' },
    })
    .post('/adjust', async (ctx) => {
      const b = ctx.body;
      const r = await s.payments.ledgerAdmin.adjust(caller(ctx).user, { userId: b.user_id, amount: b.amount, note: b.note, allowNegative: b.allow_negative });
      return ok({ entry: toLedgerView(r.entry), balance: r.balance });
    }, {
      role: 'admin',
      body: Type.Object({
        user_id: IdInput(),
        amount: Type.Integer({ minimum: -1e15, maximum: 1e15, description: 'Signed quota units, non-zero: positive credits, negative debits' }),
        note: Type.String({ minLength: 1, maxLength: 500, description: 'Why (kept in the ledger)' }),
        allow_negative: Type.Optional(Type.Boolean({ description: 'Allow a debit to take the balance below zero' })),
      }),
      response: envelope(t.Object({ entry: LedgerEntryView, balance: t.Integer() })),
      detail: { tags, summary: 'Adjust a balance', description: 'Credits (positive) or debits (negative) a user by hand: admins on users of a lower role, root on anyone. Recorded as kind `adjust` with ref `adjust:<uuid>`. A credit that would take the balance above MAX_BALANCE (4×10¹⁵ quota units), or a debit with allow_negative below −MAX_BALANCE, is 409 `balance_limit` and changes nothing.',
        responses: { 409: { description: 'balance_limit: the result would leave −MAX_BALANCE..MAX_BALANCE; nothing changed' } } } as any,
    });
