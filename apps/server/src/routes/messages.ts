/**
 * The model-facing API: POST /v1/messages, POST /v1/messages/count_tokens, GET /v1/models[/:id].
 * Check order: key (401, checked by the front door before anything reads the body) → version header
 * (400, route `transform`) → JSON parse (400, raised by http-errors' beforeHandle) → body schema (400)
 * → key status/model/IP (401/403) → gateway capacity (503, MAX_UPSTREAM_CONNECTIONS) → rate limit (429) → quota (402)
 * → routing (404/503).
 */
import { Elysia } from 'elysia';
import { ModelInfoSchema, ModelPageSchema, checkVersionHeader, isLoggedError, validateCountTokensBody, validateMessagesBody, type GateKey } from '@gw/relay';
import { AnthropicMessageSchema, CountTokensRequestSchema, MessagesRequestSchema } from '@gw/formats';
import { clientIp } from '../plugins/client-ip';
import { requestIdOf } from '../plugins/http-errors';
import { relayKeyOf } from '../plugins/relay-key';
import type { Services } from '../services';

const versioned = { transform: ({ request }: { request: Request }) => { checkVersionHeader(request.headers); } };

/**
 * The bodies are validated in the handlers, after the key and version checks (a bad key must answer 401 before a bad body answers 400),
 * so Elysia gets no `body` schema; the OpenAPI document gets the same TypeBox schemas here instead.
 */
const versionHeader = {
  name: 'vendor-version', in: 'header', required: true, schema: { type: 'string', format: 'date', example: '2023-06-01' },
  description: 'API version date (YYYY-MM-DD); anthropic-version is accepted as an alias',
};
const json = (schema: unknown) => ({ content: { 'application/json': { schema } } });
const errorResponses = {
  400: { description: 'Invalid header or body (error.param names the field)' }, 401: { description: 'Missing or invalid API key' },
  402: { description: 'Quota exhausted' }, 403: { description: 'Model or IP not allowed for this key; model not priced (model_not_priced); code-execution tool not priced (tool_not_priced)' }, 404: { description: 'Unknown model' },
  429: { description: 'Rate limited (retry-after)' }, 503: { description: 'No healthy channel, or the gateway relays MAX_UPSTREAM_CONNECTIONS requests already (overloaded_error, retry-after)' },
};
const messagesDoc = {
  parameters: [versionHeader],
  requestBody: { required: true, ...json(MessagesRequestSchema) },
  responses: {
    200: { description: 'A message (JSON), or with stream:true an SSE stream of Anthropic events', ...json(AnthropicMessageSchema) },
    ...errorResponses,
  },
};
const countDoc = {
  parameters: [versionHeader],
  requestBody: { required: true, ...json(CountTokensRequestSchema) },
  responses: { 200: { description: 'Input token count', ...json({ type: 'object', properties: { input_tokens: { type: 'integer' } }, required: ['input_tokens'] }) }, ...errorResponses },
};

/**
 * Runs a relay call registered in flight under its key and owner: the relay sees the client's abort
 * and the credential's revocation as one signal (a revoked stream ends with an `error` event), and
 * the registration ends when the request is settled.
 */
async function relayGuarded(s: Services, key: GateKey, run: (signal: AbortSignal, onSettled: () => void) => Promise<Response>, client: AbortSignal): Promise<Response> {
  // The gateway-wide cap first (503 at once), so a refused request holds no quota and calls no upstream.
  const slot = s.relay.slots.acquire(key.userId);
  const h = s.relay.inflight.open(key.id, key.userId, client);
  const release = releaseOf(h, slot);
  try {
    return await run(h.signal, release);
  } catch (e) {
    release();
    // Revoked before the first byte: the revocation is the answer, not the upstream abort it caused; unless the
    // request had already ended and its usage row says how (the revocation landed while that row committed).
    throw h.revocation && !isLoggedError(e) ? h.revocation : e;
  }
}

/**
 * Built outside relayGuarded: a stream holds its release until it ends, and a closure made inside would
 * keep relayGuarded's whole scope (the route's closure, the request and its parsed body) alive with it.
 */
const releaseOf = (h: { release(): void }, slot: () => void) => () => { h.release(); slot(); };

/** The key checks plus the request-per-minute limits, for routes that generate nothing (no tokens, no slot held). */
async function authorizeQuick(s: Services, key: GateKey, model: string | null, ip: string) {
  const a = s.relay.gate.authorize(key, model, ip);
  await s.relay.limiter.admit({ key, user: a.user, group: s.relay.relay.policy(a.group) }, { tokens: 0, hold: false, model });
  return a;
}

export const messagesRoutes = (s: Services) =>
  new Elysia({ name: 'messages-routes', prefix: '/v1' })
    .derive(({ request }) => ({ startedAt: performance.now(), relayKey: relayKeyOf(s, request) }))
    .post('/messages', ({ body, request, server, relayKey, startedAt }) => {
      const req = validateMessagesBody(body);
      const ip = clientIp(request, server);
      const { user, group } = s.relay.gate.authorize(relayKey, req.model, ip);
      return relayGuarded(s, relayKey, (signal, onSettled) => s.relay.relay.messages({ requestId: requestIdOf(request), body: req, headers: request.headers, key: relayKey, user, group, ip, startedAt, signal, onSettled }), request.signal);
    }, { ...versioned, detail: { tags: ['model'], summary: 'Create a message', description: 'Anthropic Messages. Answers one JSON message, or with `stream: true` an SSE stream of Anthropic events. Checks, in order: 401 key, 400 version header, 400 JSON, 400 body schema, 401/403 key status, model and IP, 503 gateway at capacity (overloaded_error, retry-after), 429 rate limit, 403 model not priced (model_not_priced) or a code-execution tool on a model whose price sets no code_execution (tool_not_priced, param tools.<i>), 402 quota, 404 unknown model, 503 no healthy channel. Billed once, from the usage the upstream reports.', ...messagesDoc } as any })
    .post('/messages/count_tokens', async ({ body, request, server, relayKey }) => {
      const req = validateCountTokensBody(body);
      const { group } = await authorizeQuick(s, relayKey, req.model, clientIp(request, server));
      const slot = s.relay.slots.acquire(relayKey.userId);
      try {
        return await s.relay.catalog.countTokens(req, group, request.headers, relayKey.userId);
      } finally {
        slot();
      }
    }, { ...versioned, detail: { tags: ['model'], summary: 'Count input tokens', description: 'Counts the input tokens of a Messages body: upstream on Anthropic channels, else a local estimate (within about 25%). Not billed.', ...countDoc } as any })
    .get('/models', async ({ request, server, relayKey, query }) => {
      const { group } = await authorizeQuick(s, relayKey, null, clientIp(request, server));
      const limit = query.limit === undefined ? undefined : Number(query.limit);
      return s.relay.catalog.list(relayKey, group, { limit: Number.isFinite(limit) ? limit : undefined, after_id: query.after_id, before_id: query.before_id });
    }, { detail: { tags: ['model'], summary: 'List models', description: 'The models this key may use (its allow-list intersected with what its group is served), in Anthropic\'s list shape, paged by `limit`, `after_id` and `before_id`.', responses: { 200: { description: 'A page of models', ...json(ModelPageSchema) }, 401: errorResponses[401] } } as any })
    .get('/models/:id', async ({ request, server, relayKey, params }) => {
      const { group } = await authorizeQuick(s, relayKey, null, clientIp(request, server));
      return s.relay.catalog.get(relayKey, group, params.id);
    }, { detail: { tags: ['model'], summary: 'Get a model', description: 'One model this key may use; 404 otherwise.', responses: { 200: { description: 'The model', ...json(ModelInfoSchema) }, 401: errorResponses[401], 404: errorResponses[404] } } as any });
