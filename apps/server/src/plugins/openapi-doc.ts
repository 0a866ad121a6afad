/**
 * Turns the generator's raw document into one worth reading: described tags in reading order (model API
 * first), the error object declared once and referenced by every operation's error responses, the
 * request/response schemas named in `components.schemas` and referenced where they are used, and
 * examples on the core requests.
 */
import { NAMED_SCHEMAS } from './openapi-schemas';
import { EXAMPLES } from './openapi-examples';

export type Doc = { paths?: Record<string, Record<string, any>>; components?: Record<string, any>; [k: string]: unknown };

/** Tags in the order the UI shows them: what clients call first, then what operators manage. */
export const TAGS = [
  { name: 'model', description: 'The model API (`/v1`): Anthropic Messages over JSON or SSE, token counting and the models a key may use. Authenticated by a relay API key (`sk-…`) in `x-api-key` or `Authorization: Bearer`.' },
  { name: 'realtime', description: 'The OpenAI Realtime relay: a WebSocket upgrade on `/v1/realtime`, metered per response.' },
  { name: 'session', description: 'Log in and out, the caller, and management access tokens (`gwm_…`) for scripts and the CLI.' },
  { name: 'user', description: 'User administration (admins, on users of a lower role) and the caller\'s own profile.' },
  { name: '2fa', description: 'TOTP two-factor authentication with single-use backup codes.' },
  { name: 'password', description: 'Password change and the e-mailed password reset.' },
  { name: 'token', description: 'Relay API keys (`sk-…`) used on `/v1`: the caller\'s own keys; admins pass `user_id`.' },
  { name: 'channel', description: 'Upstream channels (admin): accounts of an upstream provider that serve models, chosen by model, group, priority and weight.' },
  { name: 'pricing', description: 'Model prices (admin), in integer quota units per million tokens.' },
  { name: 'group', description: 'Groups (admin): price ratio, routing fallbacks and limits shared by their users and keys.' },
  { name: 'budget', description: 'Daily and monthly budgets of users and keys (UTC periods) on top of the balance, low-balance alerts, and the signed alert webhook\'s outbox.' },
  { name: 'logs', description: 'Usage logs: one row per metered request.' },
  { name: 'topup', description: 'Prepaid top-ups through the configured payment providers.' },
  { name: 'ledger', description: 'The balance ledger: every top-up, charge, refund, manual adjustment and redeemed code.' },
  { name: 'redemption', description: 'Single-use redemption codes worth quota: admins mint, list and revoke batches; users redeem a code once.' },
  { name: 'webhook', description: 'Signed payment-provider callbacks (no credentials: the signature is the credential).' },
  { name: 'system', description: 'Liveness and Prometheus metrics.' },
];

const errorObject = {
  type: 'object', required: ['message', 'type', 'param', 'code'],
  description: 'The error object: four strings, always present.',
  properties: {
    message: { type: 'string', description: 'Human-readable explanation' },
    type: { type: 'string', description: 'Error class, e.g. invalid_request_error, authentication_error, rate_limit_error' },
    param: { type: 'string', description: 'The offending field or header (e.g. `messages[0].role`); "" when none applies' },
    code: { type: 'string', description: 'Stable machine-readable code, e.g. missing_field, quota_exhausted' },
  },
};

/** The error schemas and the shared responses that point at them (one per surface). */
export const ERROR_COMPONENTS = {
  schemas: {
    ErrorObject: errorObject,
    ModelError: {
      type: 'object', required: ['type', 'error', 'request_id'], description: 'An error on `/v1` (Anthropic shape).',
      properties: { type: { const: 'error' }, error: { $ref: '#/components/schemas/ErrorObject' }, request_id: { type: 'string' } },
      example: { type: 'error', error: { message: 'messages[0].role: field is required', type: 'invalid_request_error', param: 'messages[0].role', code: 'missing_field' }, request_id: '01J…' },
    },
    ApiError: {
      type: 'object', required: ['success', 'message', 'error', 'request_id'], description: 'An error on `/api` (management envelope).',
      properties: { success: { const: false }, message: { type: 'string', description: 'Same as error.message' }, error: { $ref: '#/components/schemas/ErrorObject' }, request_id: { type: 'string' } },
      example: { success: false, message: 'Channel 7 not found', error: { message: 'Channel 7 not found', type: 'not_found_error', param: 'id', code: 'channel_not_found' }, request_id: '01J…' },
    },
  },
  responses: {
    ModelError: { description: 'Error (see error.code)', content: { 'application/json': { schema: { $ref: '#/components/schemas/ModelError' } } } },
    ApiError: { description: 'Error (see error.code)', content: { 'application/json': { schema: { $ref: '#/components/schemas/ApiError' } } } },
  },
};

const STANDARD_ERRORS: Record<string, string> = {
  400: 'Invalid input; error.param names the field',
  401: 'Missing or invalid credentials',
  403: 'Not allowed for this caller',
  404: 'Not found',
  413: 'Request body too large',
  429: 'Too many requests (retry-after)',
  500: 'Internal error (a bug; the request id is in the server log)',
};

/** Every error status of an operation: those it documents, plus what the front door can answer for any route. */
function errorStatuses(path: string, op: any, isPublic: boolean): string[] {
  const own = Object.keys(op.responses ?? {}).filter((s) => /^[45]\d\d$/.test(s));
  const std = ['400', '413', '500'];
  if (!isPublic) std.push('401');
  if (!isPublic && !path.startsWith('/v1')) std.push('403');
  if (path.includes('{')) std.push('404');
  if (path.startsWith('/v1')) std.push('429');
  return [...new Set([...own, ...std])].sort();
}

/** Points every error response at the shared one, keeping an operation's own description of the status. */
function linkErrors(path: string, op: any, isPublic: boolean) {
  const ref = path.startsWith('/v1') ? '#/components/responses/ModelError' : '#/components/responses/ApiError';
  op.responses ??= {};
  for (const status of errorStatuses(path, op, isPublic)) {
    const description = op.responses[status]?.description ?? STANDARD_ERRORS[status] ?? 'Error';
    op.responses[status] = { $ref: ref, description };
  }
}

/**
 * Hoists every schema titled with a registered name into `components.schemas` (first occurrence, as
 * generated) and puts a reference in its place, nested named schemas included.
 */
function nameSchemas(doc: Doc) {
  const schemas: Record<string, unknown> = {};
  const replace = (node: any): any => {
    if (Array.isArray(node)) return node.map(replace);
    if (!node || typeof node !== 'object') return node;
    const children = () => Object.fromEntries(Object.entries(node).map(([k, v]) => [k, replace(v)]));
    const name = typeof node.title === 'string' && node.title in NAMED_SCHEMAS ? node.title : undefined;
    if (!name) return children();
    if (!(name in schemas)) {
      schemas[name] = true; // claimed before the walk: a schema nested in itself ends in a reference
      schemas[name] = children();
    }
    return { $ref: `#/components/schemas/${name}` };
  };
  doc.paths = replace(doc.paths);
  return schemas;
}

/** Adds the examples of the core requests (and a JSON body where the route reads raw bytes, as webhooks do). */
function addExamples(doc: Doc) {
  for (const [key, example] of Object.entries(EXAMPLES)) {
    const [method, path] = key.split(' ') as [string, string];
    const op = doc.paths?.[path]?.[method.toLowerCase()];
    if (!op) continue;
    op.requestBody ??= { required: true, content: { 'application/json': { schema: { type: 'object', additionalProperties: true } } } };
    const media = (op.requestBody.content ??= {})['application/json'] ??= { schema: { type: 'object' } };
    media.example = example;
  }
}

/**
 * A missing JSON body is read as `{}`, so a body none of whose fields is required may be left out (DELETE of a
 * session, PUT /api/user/self): the generator marks every body required, which sent clients a body they need not.
 * Runs before the examples add the webhooks' raw bodies, which are required.
 */
function markOptionalBodies(doc: Doc) {
  for (const ops of Object.values(doc.paths ?? {})) {
    for (const op of Object.values(ops)) {
      const schema = op?.requestBody?.content?.['application/json']?.schema;
      if (schema?.type === 'object' && !schema.required?.length) op.requestBody.required = false;
    }
  }
}

/** The finished document: `generated` is the generator's output; `isPublic` says which operations need no credentials. */
export function finishDocument(generated: Doc, info: Record<string, unknown>, isPublic: (method: string, path: string) => boolean): Doc {
  const doc: Doc = { ...generated, paths: generated.paths ?? {} };
  markOptionalBodies(doc);
  addExamples(doc);
  for (const [path, ops] of Object.entries(doc.paths!)) {
    for (const [method, op] of Object.entries(ops)) {
      if (op && typeof op === 'object') linkErrors(path, op, isPublic(method, path));
    }
  }
  const named = nameSchemas(doc);
  // Paths in tag order too: renderers that list paths rather than tags show the model API first as well.
  const rank = (ops: Record<string, any>) => Math.min(...Object.values(ops).map((op) => {
    const i = TAGS.findIndex((t) => t.name === op?.tags?.[0]);
    return i < 0 ? TAGS.length : i;
  }));
  doc.paths = Object.fromEntries(Object.entries(doc.paths!).sort((a, b) => rank(a[1]) - rank(b[1])));
  return {
    openapi: '3.1.0',
    info,
    tags: TAGS,
    ...doc,
    components: {
      ...(generated.components ?? {}),
      schemas: { ...(generated.components?.schemas ?? {}), ...named, ...ERROR_COMPONENTS.schemas },
      responses: ERROR_COMPONENTS.responses,
    },
  };
}
