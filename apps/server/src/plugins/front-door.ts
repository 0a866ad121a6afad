/**
 * The front door: what every request must pass before any route code runs, decided per route from the
 * app's own route table so a new route gets it for free.
 *
 * - onRequest (headers only, nothing read yet): cross-site refusal for cookie writes (403), credentials
 *   on authenticated routes (401), declared size against the route's limit (413), JSON media type (415).
 * - onParse (the one body reader of the app): the body is read under the same size limit and a total
 *   deadline (408), kept as raw bytes for signed webhooks, and JSON is depth-checked before `JSON.parse`.
 *   Malformed or too-deep JSON, and on /api a body that is not a JSON object (or holds a lone surrogate or a
 *   `__proto__` key), is a deferred 400, raised after auth and header checks (the contract's check order: credentials, headers, then the body).
 */
import { Elysia } from 'elysia';
import { GatewayError, errorResponse, jsonBodyIssue, parseBoundedJson, readRequestBody, surfaceOf } from '@gw/core';
import { bodyErrors, requestIdOf, startedAtOf } from './http-errors';
import { isCrossSite } from './same-origin';
import type { RouteKind, RoutePolicy, RouteTable } from './route-table';

export interface FrontDoorOptions {
  table: () => RouteTable;
  /** Body limit of authenticated routes (MAX_BODY_BYTES) and of public ones (ANON_MAX_BODY_BYTES). */
  maxBodyBytes: number;
  anonMaxBodyBytes: number;
  jsonMaxDepth: number;
  bodyTimeoutMs: number;
  /** PUBLIC_URL's origin, accepted as same-origin besides the request's Host. */
  publicOrigin: string | null;
  /**
   * The 401 for a request without valid credentials of the route's kind, or null. Relay keys are
   * checked in memory (a plain value); management credentials are read from storage (a promise).
   */
  authenticate: (request: Request, kind: Exclude<RouteKind, 'public'>) => GatewayError | null | Promise<GatewayError | null>;
  /** Whether the request is authenticated by the browser-attached session cookie. */
  usesSessionCookie: (request: Request) => boolean;
}

/** Methods that may carry a body or change state. */
const WRITE_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

const policies = new WeakMap<Request, RoutePolicy>();
const rawBodies = new WeakMap<Request, Uint8Array>();

/** The exact bytes of a raw route's body (signed webhooks verify these), as read by the front door. */
export const rawBodyOf = (r: Request) => rawBodies.get(r);

/** `application/json` exactly, parameters (charset) aside: `…;a=json` or `text/json+x` are not JSON. */
export const isJsonMediaType = (ct: string) => {
  const i = ct.indexOf(';');
  return (i < 0 ? ct : ct.slice(0, i)).trim().toLowerCase() === 'application/json';
};

const nulTexts = new WeakMap<Request, string>();

/**
 * Where the management body holds its first NUL (its `param` path), as the front door's walk found it; undefined when
 * it holds none (or was not walked: a /v1 body, raw bytes). Refused later, by nul-text.ts, which keeps its own order.
 */
export const bodyNulAt = (r: Request) => nulTexts.get(r);

/**
 * What a management (/api) body is refused for once parsed, or null; /v1 routes check their own bodies with their
 * own wording (and there a `__proto__` key is the client's data, forwarded as sent). It must be an object ({...}),
 * no string or key may hold a lone surrogate, and no object in it may have a key named `__proto__` (see jsonBodyIssue).
 * A NUL, found by the same walk, is not refused here but noted for the request (bodyNulAt).
 */
function managementBodyError(request: Request, v: unknown): GatewayError | null {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return new GatewayError(400, 'invalid_type', 'Request body must be a JSON object');
  const issue = jsonBodyIssue(v);
  if (issue === null) return null;
  if (issue.kind === 'nul_text') {
    nulTexts.set(request, issue.at);
    return null;
  }
  if (issue.kind === 'proto_key') {
    return new GatewayError(400, 'invalid_value', `${issue.at}: "__proto__" cannot be used as a key (it would be dropped, not stored)`, { param: issue.at });
  }
  return new GatewayError(400, 'invalid_format',
    `${issue.at || 'body'}: text holds an unpaired UTF-16 surrogate (a lone \\uD800-\\uDFFF escape), which cannot be stored`, { param: issue.at });
}

/** Declared body length (0 when none), and whether a body comes at all (declared or chunked). */
const declaredLength = (r: Request) => Number(r.headers.get('content-length') ?? '0');
const hasBody = (r: Request, len = declaredLength(r)) => len > 0 || r.headers.has('transfer-encoding');

const pathOf = (url: string) => {
  const start = url.indexOf('/', url.indexOf('//') + 2);
  const q = url.indexOf('?', start);
  return url.slice(start, q < 0 ? undefined : q);
};

export const frontDoor = (o: FrontDoorOptions) => {
  // An answer given before the body was read (or while it was) closes the connection: otherwise Bun keeps
  // receiving the unread body to find the next request, which is the very work being refused.
  const CLOSE = { connection: 'close' };
  const tooLarge = (limit: number) => new GatewayError(413, 'request_too_large', `Request body exceeds ${limit} bytes`, { headers: CLOSE });
  const reject = (request: Request, pathname: string, e: GatewayError) => {
    const res = errorResponse(e, surfaceOf(pathname), requestIdOf(request));
    if (hasBody(request)) res.headers.set('connection', 'close');
    return res;
  };
  const anonLimit = Math.min(o.anonMaxBodyBytes, o.maxBodyBytes);
  const limitOf = (p: RoutePolicy | undefined) => (p && p.kind !== 'public' ? o.maxBodyBytes : anonLimit);

  /** The checks after the credentials: body-less methods, declared size, media type. */
  const afterAuth = (request: Request, pathname: string, write: boolean, policy: RoutePolicy | undefined) => {
    // A method no route reads a body of has a limit of zero; the refusal closes the connection unread.
    if (!write) return reject(request, pathname, new GatewayError(413, 'request_too_large', `${request.method} requests take no body`, { headers: CLOSE }));
    const limit = limitOf(policy);
    const len = declaredLength(request);
    if (len > limit) return reject(request, pathname, tooLarge(limit));
    if (hasBody(request, len) && !policy?.raw && !isJsonMediaType(request.headers.get('content-type') ?? '')) {
      return reject(request, pathname, new GatewayError(415, 'unsupported_media_type', 'Content-Type must be application/json', { param: 'content-type' }));
    }
  };

  return new Elysia({ name: 'front-door' })
    .onRequest(({ request }) => {
      const write = WRITE_METHODS.has(request.method);
      // Bun drains a body no route reads to keep the connection alive, at any length (MAX_BODY_BYTES is
      // ours, not Bun's): a GET/HEAD/OPTIONS with a declared 4 GB body was received in full, anonymously.
      if (!write && !hasBody(request)) return;
      const pathname = pathOf(request.url);
      const policy = o.table().find(request.method, pathname);
      // Unknown routes still get the public limits; the router answers 404/405 without reading the body.
      if (policy) policies.set(request, policy);
      if (write && policy && !policy.raw && policy.kind !== 'relay' && o.usesSessionCookie(request) && isCrossSite(request, o.publicOrigin)) {
        return reject(request, pathname, new GatewayError(403, 'cross_site_request', 'Cross-site requests may not use the session cookie; send them from the gateway origin or use an access token', { param: 'origin' }));
      }
      if (policy && policy.kind !== 'public') {
        const e = o.authenticate(request, policy.kind);
        if (e instanceof Promise) return e.then((err) => (err ? reject(request, pathname, err) : afterAuth(request, pathname, write, policy)));
        if (e) return reject(request, pathname, e);
      }
      return afterAuth(request, pathname, write, policy);
    })
    .onParse({ as: 'global' }, async ({ request }) => {
      const policy = policies.get(request);
      const limit = limitOf(policy);
      const bounds = { limit, deadline: (startedAtOf(request) ?? performance.now()) + o.bodyTimeoutMs };
      const read = policy?.raw ? await readRequestBody(request, bounds, 'bytes') : await readRequestBody(request, bounds, 'text');
      if (!read.ok) {
        if (read.reason === 'too_large') throw tooLarge(limit);
        if (read.reason === 'timeout') throw new GatewayError(408, 'body_timeout', `Request body did not arrive within ${o.bodyTimeoutMs} ms`, { headers: CLOSE });
        throw new GatewayError(400, 'body_incomplete', 'Request body ended early', { headers: CLOSE });
      }
      if ('bytes' in read) {
        rawBodies.set(request, read.bytes);
        return read.bytes;
      }
      const parsed = parseBoundedJson(read.text, o.jsonMaxDepth);
      if (parsed.ok) {
        // Elysia's validator copies a body's declared fields into a fresh object before checking it, so an
        // array, string or number passed as `{}`: an all-optional body (PUT /api/user/self) answered 200.
        const refused = policy?.kind === 'relay' ? null : managementBodyError(request, parsed.value);
        if (refused) {
          bodyErrors.set(request, refused);
          return {};
        }
        return parsed.value;
      }
      bodyErrors.set(request, parsed.reason === 'too_deep'
        ? new GatewayError(400, 'json_too_deep', `Request body nests deeper than ${o.jsonMaxDepth} levels`)
        : new GatewayError(400, 'invalid_json', 'Request body is not valid JSON'));
      return {};
    });
};
