/**
 * Request ids and the single place errors are rendered to the wire: validation, parse, unknown
 * route (404) and method (405), and every GatewayError (the front door's 401/403/408/413/415 included).
 */
import { Elysia } from 'elysia';
import { Kind } from '@sinclair/typebox';
import { ValueErrorType } from '@sinclair/typebox/errors';
import { GatewayError, errorResponse, errorText, newRequestId, pointerToParam, surfaceOf, toGatewayError, valueAt, type Logger } from '@gw/core';
import { isPlaceholder } from './quiet-validation';
import type { RouteTable } from './route-table';

/**
 * Requests whose body was not acceptable JSON (malformed, too deep). The parser records them instead of
 * failing, so that header checks in `transform` still answer first; the error is raised before the handler.
 */
export const bodyErrors = new WeakMap<Request, GatewayError>();
const invalidJsonError = () => new GatewayError(400, 'invalid_json', 'Request body is not valid JSON');

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
 * empty path); recover it from the URL (the path's parameters, then the query) so `param` still names the field.
 */
function coercedParamName(err: any, request: Request, params: Record<string, unknown> | undefined): string {
  if (err.type !== 'property' || err.value === undefined) return '';
  const value = String(err.value);
  // A digit string is judged as the number it became, which may print otherwise: 12345678901234567890 became
  // 12345678901234567000, 400 nines Infinity (the name was lost, `param: ""`).
  const same = (raw: unknown) => raw === value || (typeof err.value === 'number' && typeof raw === 'string' && /^-?\d+$/.test(raw) && Number(raw) === err.value);
  for (const [k, v] of Object.entries(params ?? {})) if (same(v)) return k;
  for (const [k, v] of new URL(request.url).searchParams) if (same(v)) return k;
  return '';
}

/**
 * An integer past a field's bounds that TypeBox reports as a wrong type, said as what it is (`out_of_range`): a digit
 * string (path or query) or JSON number too long for a double arrives as ±Infinity, which TypeBox calls "not an
 * integer"; and a number outside the integer branch of a nullable field (`expires_at: 1e19`) fails the union as a whole.
 */
function outOfRange(ve: any): string | undefined {
  const v = ve?.value;
  if (typeof v !== 'number' || !(Number.isInteger(v) || v === Infinity || v === -Infinity)) return undefined;
  const int = ve.type === ValueErrorType.Integer ? ve.schema
    : ve.type === ValueErrorType.Union ? ve.schema?.anyOf?.find((x: any) => x?.[Kind] === 'Integer') : undefined;
  if (!int) return undefined;
  if (typeof int.maximum === 'number' && v > int.maximum) return `Expected integer to be less or equal to ${int.maximum}`;
  if (typeof int.minimum === 'number' && v < int.minimum) return `Expected integer to be greater or equal to ${int.minimum}`;
  return Number.isFinite(v) ? undefined : 'Number out of range';
}

export function validationError(err: any, where: string, request: Request, params?: Record<string, unknown>): GatewayError {
  const ve = err.valueError ?? err.all?.[0];
  // For a missing property TypeBox points at the property itself, which is what `param` should name.
  const param = pointerToParam(ve?.path ?? '') || coercedParamName(err, request, params);
  const custom = typeof err.customError === 'string' && !isPlaceholder(err.customError) ? err.customError : undefined;
  const detail = custom ?? ve?.message ?? 'Invalid value';
  const label = param || where;
  // TypeBox reports a missing property as a type error at its path; say what it really is.
  const missing = ve?.path && valueAt(err.value, ve.path) === undefined;
  if (missing || ve?.type === ValueErrorType.ObjectRequiredProperty) {
    return new GatewayError(400, 'missing_field', `${label}: field is required`, { param });
  }
  const outside = outOfRange(ve);
  if (outside) return new GatewayError(400, 'out_of_range', `${label}: ${custom ?? outside}`, { param });
  return new GatewayError(400, codeFor(ve?.type), `${label}: ${detail}`, { param });
}

/**
 * One log line per failed request. Expected failures (the client's 4xx, an upstream's or a channel's 5xx,
 * all GatewayErrors) are events without a stack; an unknown throw is a bug in our code and logs its stack.
 */
export function logFailure(log: Logger, request: Request, gw: GatewayError, thrown: unknown) {
  const fields = { id: requestIdOf(request), method: request.method, path: pathOf(request.url), status: gw.status, code: gw.code };
  // An unknown throw, or one our code caught and wrapped as internal_error, is a bug: its stack is the lead.
  if (!(thrown instanceof GatewayError)) return log.error('request.bug', fields, thrown);
  if (gw.code === 'internal_error') return log.error('request.bug', fields, gw.cause ?? gw);
  // An upstream's or a channel's failure says why in `cause`; a client's 4xx is explained by its code.
  if (gw.status >= 500) log.warn('request.failed', { ...fields, cause: gw.cause === undefined ? undefined : errorText(gw.cause) });
  else log.info('request.rejected', fields);
}

const pathOf = (url: string) => url.replace(/^[a-z]+:\/\/[^/]+/i, '').replace(/\?.*$/, '');

/**
 * A handler's Response is sent as it is only when `set` adds nothing to it: with any header on `set` (the request id
 * always is), Elysia copies it into a new Response over the first one's body stream, the headers merged, the
 * Response's own winning. Every relay answer already carries its request id, so those `set` entries change nothing:
 * dropping them sends the same status, headers and bytes without the copy (about 1.5 µs of CPU per request, see
 * README "Performance"). Anything else on `set` (a header the Response lacks, a cookie, a status) is left to Elysia,
 * and so is a Response without a content-type: the copy sends it as application/octet-stream, where Bun would
 * derive one from the body.
 */
export function dropHeadersTheResponseHas(response: unknown, set: { headers: Record<string, unknown> }): void {
  if (!(response instanceof Response)) return;
  const own = response.headers;
  if (!own.has('content-type')) return;
  for (const k in set.headers) if (k !== 'set-cookie' && own.has(k)) delete set.headers[k];
}

/** `table` is read lazily (the app's route table is complete only after every plugin registered). */
export const httpErrors = (opts: { table: () => RouteTable; log: Logger }) => {
  const plugin = new Elysia({ name: 'http-errors' })
    .onRequest(({ request, set }) => {
      const id = newRequestId();
      requestIds.set(request, id);
      startTimes.set(request, performance.now());
      set.headers['request-id'] = id;
    })
    .onBeforeHandle({ as: 'global' }, ({ request }) => {
      const e = bodyErrors.get(request);
      if (e) throw e;
    })
    .onAfterHandle({ as: 'global' }, ({ responseValue, set }) => dropHeadersTheResponseHas(responseValue, set))
    .onError({ as: 'global' }, (ctx) => {
      const { code, error, request, path, set } = ctx;
      const id = requestIdOf(request);
      const surface = surfaceOf(path ?? new URL(request.url).pathname);
      let gw: GatewayError;
      if (code === 'VALIDATION') {
        gw = bodyErrors.get(request) ?? validationError(error, (error as any).type ?? 'body', request, (ctx as { params?: Record<string, unknown> }).params); // the matched route's raw values
      } else if (code === 'PARSE') {
        // The front door's reader throws its own 408/413; Elysia wraps anything thrown while parsing.
        const cause = (error as Error).cause;
        gw = cause instanceof GatewayError ? cause : invalidJsonError();
      } else if (code === 'NOT_FOUND') {
        const pathname = new URL(request.url).pathname;
        const allowed = opts.table().methodsFor(pathname);
        gw = allowed.length && !allowed.includes(request.method)
          ? new GatewayError(405, 'method_not_allowed', `Method ${request.method} is not allowed on ${pathname}`, { headers: { allow: allowed.join(', ') } })
          : new GatewayError(404, 'route_not_found', `No route ${request.method} ${pathname}`, { type: 'invalid_request_error' });
      } else {
        gw = toGatewayError(error);
      }
      logFailure(opts.log, request, gw, code === 'VALIDATION' || code === 'PARSE' || code === 'NOT_FOUND' ? gw : error);
      // Also on `set`, so later hooks (the access log) see the status actually sent.
      set.status = gw.status;
      return errorResponse(gw, surface, id);
    });
  return plugin;
};
