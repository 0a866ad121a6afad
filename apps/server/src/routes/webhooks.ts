/**
 * Payment webhooks (no auth: the signature is the credential). The signature covers the raw
 * bytes: the front door's body reader (size cap and deadline of public routes) keeps them for us.
 */
import { Elysia, t } from 'elysia';
import { ok } from '@gw/core';
import { rawBodyOf } from '../plugins/front-door';
import type { ProviderId } from '@gw/payments';
import type { Services } from '../services';
import { envelope } from './envelope';

const PATHS: Record<string, ProviderId> = { '/api/providerA/webhook': 'providerA', '/api/providerB/webhook': 'providerB' };

const Result = envelope(t.Object({ outcome: t.String({ description: 'credited | failed | expired | duplicate | ignored | noop:… | unknown_order | not_pending:… | mismatch:… | user_not_found; refunds and disputes: refunded | dispute_withdrawn | dispute_reinstated | not_paid:…' }), trade_no: t.Union([t.String(), t.Null()]) }));

export const webhookRoutes = (s: Services) => {
  const handle = async (provider: ProviderId, request: Request) => {
    // Absent only when no body was sent (the handler then verifies an empty body and answers 400).
    const raw = rawBodyOf(request) ?? new Uint8Array(0);
    const r = await s.payments.webhooks.handle(provider, raw, request.headers);
    return ok({ outcome: r.outcome, trade_no: r.tradeNo });
  };
  // The front door's reader keeps the bytes; this keeps Elysia from parsing them by content type.
  const parse = () => 'raw';
  const detail = (name: string, scheme: string, header: string) => ({
    tags: ['webhook'],
    parameters: [{ name: header, in: 'header' as const, required: true, schema: { type: 'string' as const }, description: 'Signature over the raw body' }],
    summary: `${name} Webhook`,
    description: `Payment callback signed with ${scheme}. A missing body or signature, a bad signature or a stale timestamp is a 400 and changes nothing; anything else is a 200 with \`data.outcome\` (credited, duplicate, mismatch:…, ignored, …), except a credit (a paid order, a won dispute) that would take the user's balance above MAX_BALANCE (4×10¹⁵): 409 \`balance_limit\`, nothing credited, so the provider retries; a paid order's event is recorded with outcome balance_limit, the order stays pending, and a retry is processed again. Refunds and disputes take back the refunded or disputed share of the order's credit (ledger kind clawback; a won dispute gives it back as reinstate), once per step whatever the order of delivery; the balance may go below zero: refunded, dispute_withdrawn, dispute_reinstated, not_paid:…, unknown_order (nothing changes). A refund or dispute whose payment no order knows yet, while the provider cannot say whose it is, is 409 \`order_not_yet_known\`; money in another currency than a not yet paid order's is 409 \`currency_not_yet_known\` (nothing recorded, the provider retries).`,
  });
  return new Elysia({ name: 'webhook-routes', prefix: '/api' })
    .post('/providerA/webhook', ({ request }) => handle('providerA', request), {
      parse, response: Result, detail: detail('providerA', 'Stripe-Signature t/v1 HMAC-SHA256 over `t.rawBody`, 300 s tolerance', 'stripe-signature'),
    })
    .post('/providerB/webhook', ({ request }) => handle('providerB', request), {
      parse, response: Result, detail: detail('providerB', 'creem-signature hex HMAC-SHA256 over the raw body', 'creem-signature'),
    });
};
