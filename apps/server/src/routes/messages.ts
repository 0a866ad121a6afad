/**
 * The model-facing API: POST /v1/messages, POST /v1/messages/count_tokens, GET /v1/models[/:id].
 * Check order (API.md): key (401, in `derive`, before anything reads the body) → version header
 * (400, route `transform`) → JSON parse (400, raised by http-errors' beforeHandle) → body schema (400)
 * → key status/model/IP (401/403) and rate limit (429) → quota (402) → routing (404/503).
 */
import { Elysia } from 'elysia';
import { checkVersionHeader, validateCountTokensBody, validateMessagesBody } from '@gw/relay';
import { clientIp } from '../plugins/client-ip';
import { requestIdOf } from '../plugins/http-errors';
import type { Services } from '../services';

const versioned = { transform: ({ request }: { request: Request }) => { checkVersionHeader(request.headers); } };

export const messagesRoutes = (s: Services) =>
  new Elysia({ name: 'messages-routes', prefix: '/v1' })
    .derive(({ request }) => ({ startedAt: performance.now(), relayKey: s.relay.gate.authenticate(request.headers) }))
    .post('/messages', ({ body, request, server, relayKey, startedAt }) => {
      const req = validateMessagesBody(body);
      const ip = clientIp(request, server);
      const { group } = s.relay.gate.authorize(relayKey, req.model, ip);
      return s.relay.relay.messages({ requestId: requestIdOf(request), body: req, headers: request.headers, key: relayKey, group, ip, startedAt, signal: request.signal });
    }, { ...versioned, detail: { tags: ['model'], summary: 'Anthropic Messages (JSON or SSE with stream:true)' } })
    .post('/messages/count_tokens', ({ body, request, server, relayKey }) => {
      const req = validateCountTokensBody(body);
      const { group } = s.relay.gate.authorize(relayKey, req.model, clientIp(request, server));
      return s.relay.catalog.countTokens(req, group, request.headers);
    }, { ...versioned, detail: { tags: ['model'], summary: 'Count input tokens (upstream when it can, else a local estimate); not billed' } })
    .get('/models', ({ request, server, relayKey, query }) => {
      const { group } = s.relay.gate.authorize(relayKey, null, clientIp(request, server));
      const limit = query.limit === undefined ? undefined : Number(query.limit);
      return s.relay.catalog.list(relayKey, group, { limit: Number.isFinite(limit) ? limit : undefined, after_id: query.after_id, before_id: query.before_id });
    }, { detail: { tags: ['model'], summary: 'Models this key may use (Anthropic list shape)' } })
    .get('/models/:id', ({ request, server, relayKey, params }) => {
      const { group } = s.relay.gate.authorize(relayKey, null, clientIp(request, server));
      return s.relay.catalog.get(relayKey, group, params.id);
    }, { detail: { tags: ['model'], summary: 'One model this key may use' } });
