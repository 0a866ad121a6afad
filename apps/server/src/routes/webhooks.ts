/**
 * SPEC payment webhooks (no auth: the signature is the credential). The signature covers the raw
 * bytes, but the global JSON parser consumes the body, so the bytes are captured from a clone in
 * onRequest (before parsing) and read with a size cap.
 */
import { Elysia, t } from 'elysia';
import { GatewayError, ok, readCapped } from '@gw/core';
import type { ProviderId } from '@gw/payments';
import type { Services } from '../services';
import { envelope } from './envelope';

/** Provider events are a few KB; anything near this is not a webhook. */
export const WEBHOOK_MAX_BYTES = 1024 * 1024;
const PATHS: Record<string, ProviderId> = { '/api/providerA/webhook': 'providerA', '/api/providerB/webhook': 'providerB' };

const rawBodies = new WeakMap<Request, Promise<Uint8Array | null>>();

const Result = envelope(t.Object({ outcome: t.String({ description: 'credited | failed | expired | duplicate | ignored | noop:… | unknown_order | not_pending:… | mismatch:…' }), trade_no: t.Union([t.String(), t.Null()]) }));

export const webhookRoutes = (s: Services) => {
  const handle = async (provider: ProviderId, request: Request) => {
    const raw = await (rawBodies.get(request) ?? readCapped(request.body, WEBHOOK_MAX_BYTES));
    if (raw === null) throw new GatewayError(413, 'request_too_large', `Webhook body exceeds ${WEBHOOK_MAX_BYTES} bytes`);
    const r = s.payments.webhooks.handle(provider, raw, request.headers);
    return ok({ outcome: r.outcome, trade_no: r.tradeNo });
  };
  // The handler reads the captured bytes; this keeps Elysia from failing on a non-JSON content type.
  const parse = () => 'raw';
  const detail = (name: string, scheme: string) => ({
    tags: ['webhook'],
    summary: `${name} Webhook (SPEC): ${scheme}. 400 on a missing body/signature, bad signature or stale timestamp (nothing changes); otherwise 200 with the outcome`,
  });
  return new Elysia({ name: 'webhook-routes', prefix: '/api' })
    .onRequest(({ request }) => {
      // onRequest hooks run for every request of the app: test the cheap things before parsing the URL.
      if (request.method === 'POST' && request.url.endsWith('/webhook') && PATHS[new URL(request.url).pathname]) // An aborted upload reads as an empty body (400), never as an unhandled rejection.
        rawBodies.set(request, readCapped(request.clone().body, WEBHOOK_MAX_BYTES).catch(() => new Uint8Array(0)));
    })
    .post('/providerA/webhook', ({ request }) => handle('providerA', request), {
      parse, response: Result, detail: detail('providerA', 'Stripe-Signature t/v1 HMAC-SHA256 over `t.rawBody`, 300 s tolerance'),
    })
    .post('/providerB/webhook', ({ request }) => handle('providerB', request), {
      parse, response: Result, detail: detail('providerB', 'creem-signature hex HMAC-SHA256 over the raw body'),
    });
};
