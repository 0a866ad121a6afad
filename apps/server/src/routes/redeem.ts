/** Redemption codes: admins mint, list and revoke batches; a user redeems a code for quota. */
import { Elysia, t } from 'elysia';
import { Type } from '@sinclair/typebox';
import { ok } from '@gw/core';
import { CodesCreatedView, CreateCodesBody, RedeemedView, RedemptionBatchView, RedemptionCodeView, RedemptionStatusSchema, toBatchView, toCodeView } from '@gw/payments';
import { authPlugin, caller } from '../plugins/auth';
import type { Services } from '../services';
import { envelope, page, pageQuery } from './envelope';

const tags = ['redemption'];
const batchName = Type.String({ minLength: 1, maxLength: 64, description: 'Batch name' });

export const redeemRoutes = (s: Services) =>
  new Elysia({ name: 'redeem-routes', prefix: '/api' })
    .use(authPlugin(s))
    .post('/user/redeem', async (ctx) => {
      const r = await s.payments.redemption.redeem(caller(ctx).user.id, ctx.body.code);
      return ok({ quota: r.quota, balance: r.balance });
    }, {
      role: 'user',
      body: Type.Object({ code: Type.String({ minLength: 1, maxLength: 128, description: 'The redemption code (gwr_…)' }) }),
      response: envelope(RedeemedView),
      detail: {
        tags, summary: 'Redeem a code',
        description: 'Credits the code\'s quota to the caller, exactly once (ledger kind `redeem`, ref = the code\'s id). Unknown, already redeemed, expired and revoked codes all get the same 400 `invalid_code`. After REDEEM_MAX_FAILURES attempts that redeem nothing (invalid codes, and valid ones refused with 403 or 409) within REDEEM_FAILURE_WINDOW_SECONDS, every attempt is refused with 429 `too_many_attempts` and `retry-after`. A code that would take the balance above MAX_BALANCE (4×10¹⁵) is 409 `balance_limit` and stays unused.',
        responses: { 400: { description: 'invalid_code: unknown, already redeemed, expired or revoked' }, 409: { description: 'balance_limit: the credit would take the balance above MAX_BALANCE; the code stays unused' }, 403: { description: 'insufficient_role: admins and root redeem only codes minted by root (a spent, revoked or expired code is 400 instead)' }, 429: { description: 'too_many_attempts (retry-after)' } },
      } as any,
    })
    .post('/redemption/', async (ctx) => {
      const b = ctx.body;
      const r = await s.payments.redemption.create(caller(ctx).user.id, { batch: b.batch, count: b.count, quota: b.quota, expiresAt: b.expires_at });
      return ok({ batch: r.batch, quota: r.quota, expires_at: r.expiresAt, codes: r.codes });
    }, {
      role: 'admin', body: CreateCodesBody, response: envelope(CodesCreatedView),
      detail: {
        tags, summary: 'Create a batch of codes',
        description: 'Mints `count` single-use codes worth `quota` each, valid until `expires_at`. The codes are in this answer only: the gateway stores their SHA-256 and a short prefix, so save them now. A batch name already used is a 409 `batch_exists`.',
        responses: { 409: { description: 'batch_exists: choose another batch name' } },
      } as any,
    })
    .get('/redemption/', async ({ query: q }) => {
      const r = await s.payments.redemption.list({ batch: q.batch, status: q.status, page: q.p ?? 1, pageSize: q.page_size ?? 20 });
      return ok({ ...r, items: r.items.map((i) => toCodeView(i.row, i.status)) });
    }, {
      role: 'admin', query: t.Object({ ...pageQuery, batch: t.Optional(batchName), status: t.Optional(RedemptionStatusSchema) }),
      response: envelope(page(RedemptionCodeView)),
      detail: { tags, summary: 'List codes', description: 'Codes newest first, masked (prefix only), with their status, who redeemed them and when (admin; filter by batch and status).' },
    })
    .get('/redemption/batch', async ({ query: q }) => {
      const r = await s.payments.redemption.batches({ page: q.p ?? 1, pageSize: q.page_size ?? 20 });
      return ok({ ...r, items: r.items.map(toBatchView) });
    }, {
      role: 'admin', query: t.Object({ ...pageQuery }), response: envelope(page(RedemptionBatchView)),
      detail: { tags, summary: 'List batches', description: 'One row per batch, newest first, with its code counts by status (admin).' },
    })
    .post('/redemption/revoke', async (ctx) => ok({ batch: ctx.body.batch, revoked: await s.payments.redemption.revoke(caller(ctx).user, ctx.body.batch) }), {
      role: 'admin', body: Type.Object({ batch: batchName }),
      response: envelope(t.Object({ batch: t.String(), revoked: t.Integer({ description: 'Unused codes revoked now' }) })),
      detail: { tags, summary: 'Revoke a batch', description: 'Revokes every still-unused code of the batch (redeemed codes stay redeemed). An unknown batch is a 404 `batch_not_found`. An admin below root revokes only batches it minted (403 `role_too_high` for root\'s or another admin\'s).' },
    });
