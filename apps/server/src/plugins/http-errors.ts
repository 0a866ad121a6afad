/**
 * Request ids and the single place errors are rendered to the wire: validation, parse, unknown
 * route (404) and method (405), content type (415), body size (413), and every GatewayError.
 */
import { Elysia } from 'elysia';
import { ValueErrorType } from '@sinclair/typebox/errors';
import { GatewayError, errorResponse, newRequestId, pointerToParam, readCapped, surfaceOf, toGatewayError, valueAt } from '@gw/core';

/**
 * Requests whose body was not JSON. The parser records them instead of failing, so that auth
 * (which runs after parsing) still answers 401 first; the error is raised after auth.
 */
const bodyErrors = new WeakMap<Request, GatewayError>();
/** The deferred body error of a request (not JSON, too large), if any. */
export const bodyErrorOf = (r: Request) => bodyErrors.get(r);
export const invalidJsonError = () => new GatewayError(400, 'invalid_json', 'Request body is not valid JSON');

const requestIds = new WeakMap<Request, string>();
const startTimes = new WeakMap<Request, number>();
/** The request id assigned to a request (also in its `request-id` response header). */
export const requestIdOf = (r: Request) => requestIds.get(r) ?? '';
/** performance.now() when the request arrived (for the access log and duration metrics). */
export const startedAtOf = (r: Request) => startTimes.get(r);

function codeFor(type: number | undefined): string {
  switch (type) {
    case ValueErrorType.ObjectRequiredProperty: return 'missing_field';
    case ValueErrorType.NumberMinimum: case ValueErrorType.NumberMaximum:
    case ValueErrorType.NumberExclusiveMinimum: case ValueErrorType.NumberExclusiveMaximum:
    case ValueErrorType.IntegerMinimum: case ValueErrorType.IntegerMaximum:
    case ValueErrorType.IntegerExclusiveMinimum: case ValueErrorType.IntegerExclusiveMaximum:
    case ValueErrorType.ArrayMinItems: case ValueErrorType.ArrayMaxItems:
    case ValueErrorType.StringMinLength: case ValueErrorType.StringMaxLength:
      return 'out_of_range';
    case ValueErrorType.StringPattern: case ValueErrorType.StringFormat: return 'invalid_format';
    case ValueErrorType.ObjectAdditionalProperties: return 'unknown_field';
    default: return 'invalid_type';
  }
}

/**
 * Elysia validates a coerced query/params value on its own and loses its name (type 'property',
 * empty path); recover it from the URL so `param` still names the field.
 */
function coercedParamName(err: any, request: Request): string {
  if (err.type !== 'property' || err.value === undefined) return '';
  for (const [k, v] of new URL(request.url).searchParams) if (v === String(err.value)) return k;
  return '';
}

function validationError(err: any, where: string, request: Request): GatewayError {
  const ve = err.valueError ?? err.all?.[0];
  // For a missing property TypeBox points at the property itself, which is what `param` should name.
  const param = pointerToParam(ve?.path ?? '') || coercedParamName(err, request);
  const custom = typeof err.customError === 'string' ? err.customError : undefined;
  const detail = custom ?? ve?.message ?? 'Invalid value';
  const label = param || where;
  // TypeBox reports a missing property as a type error at its path; say what it really is.
  const missing = ve?.path && valueAt(err.value, ve.path) === undefined;
  if (missing || ve?.type === ValueErrorType.ObjectRequiredProperty) {
    return new GatewayError(400, 'missing_field', `${label}: field is required`, { param });
  }
  return new GatewayError(400, codeFor(ve?.type), `${label}: ${detail}`, { param });
}

const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH']);

type RouteMatcher = { method: string; re: RegExp };

/** `routes` is read lazily (the app's route table is complete only after every plugin registered). */
export const httpErrors = (opts: { maxBodyBytes: number; routes: () => Array<{ method: string; path: string }> }) => {
  let matchers: RouteMatcher[] | null = null;
  const plugin = new Elysia({ name: 'http-errors' })
    .onRequest(({ request, set }) => {
      const id = newRequestId();
      requestIds.set(request, id);
      startTimes.set(request, performance.now());
      set.headers['request-id'] = id;
      if (!BODY_METHODS.has(request.method)) return;
      const len = Number(request.headers.get('content-length') ?? '0');
      if (len > opts.maxBodyBytes) {
        return errorResponse(new GatewayError(413, 'request_too_large', `Request body exceeds ${opts.maxBodyBytes} bytes`), surfaceOf(new URL(request.url).pathname), id);
      }
      const hasBody = len > 0 || request.headers.has('transfer-encoding');
      const ct = request.headers.get('content-type') ?? '';
      if (!hasBody || /json/i.test(ct)) return;
      const path = new URL(request.url).pathname;
      // Webhooks are verified by signature over the raw body, whatever its declared type.
      if (!path.endsWith('/webhook')) {
        return errorResponse(new GatewayError(415, 'unsupported_media_type', 'Content-Type must be application/json', { param: 'content-type' }), surfaceOf(path), id);
      }
    })
    .onParse({ as: 'global' }, async ({ request, contentType }) => {
      if (!/json/i.test(contentType ?? '')) return;
      const text = await readLimited(request, opts.maxBodyBytes);
      if (text === null) {
        bodyErrors.set(request, new GatewayError(413, 'request_too_large', `Request body exceeds ${opts.maxBodyBytes} bytes`));
        return {};
      }
      if (text.trim() === '') return {};
      try {
        return JSON.parse(text);
      } catch {
        bodyErrors.set(request, invalidJsonError());
        return {};
      }
    })
    .onBeforeHandle({ as: 'global' }, ({ request }) => {
      const e = bodyErrors.get(request);
      if (e) throw e;
    })
    .onError({ as: 'global' }, ({ code, error, request, path, set }) => {
      const id = requestIdOf(request);
      const surface = surfaceOf(path ?? new URL(request.url).pathname);
      let gw: GatewayError;
      if (code === 'VALIDATION') {
        gw = bodyErrors.get(request) ?? validationError(error, (error as any).type ?? 'body', request);
      } else if (code === 'PARSE') {
        gw = invalidJsonError();
      } else if (code === 'NOT_FOUND') {
        matchers ??= compileRoutes(opts.routes());
        const pathname = new URL(request.url).pathname;
        const allowed = matchers.filter((m) => m.re.test(pathname)).map((m) => m.method);
        gw = allowed.length && !allowed.includes(request.method)
          ? new GatewayError(405, 'method_not_allowed', `Method ${request.method} is not allowed on ${pathname}`, { headers: { allow: [...new Set(allowed)].join(', ') } })
          : new GatewayError(404, 'route_not_found', `No route ${request.method} ${pathname}`, { type: 'invalid_request_error' });
      } else {
        gw = toGatewayError(error);
        if (gw.status >= 500) console.error(`[${id}]`, (gw.cause as Error)?.stack ?? gw.cause ?? gw);
      }
      // Also on `set`, so later hooks (the access log) see the status actually sent.
      set.status = gw.status;
      return errorResponse(gw, surface, id);
    });
  return plugin;
};

/** The app's routes as regexes, to tell "wrong method" (405) from "no such path" (404). */
function compileRoutes(routes: Array<{ method: string; path: string }>): RouteMatcher[] {
  return routes.map((r) => ({
    method: r.method,
    re: new RegExp(`^${r.path.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/:[^/]+/g, '[^/]+').replace(/\*/g, '.*')}/?$`),
  }));
}

/** Reads a body of unknown length (chunked), giving up (null) once it passes the limit. */
async function readLimited(request: Request, limit: number): Promise<string | null> {
  if (request.headers.has('content-length') || !request.body) return request.text();
  const bytes = await readCapped(request.body, limit);
  return bytes === null ? null : Buffer.from(bytes).toString('utf8');
}
