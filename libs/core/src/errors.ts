/**
 * The one error type of the gateway. Every failure that reaches the wire is a GatewayError;
 * `renderError` (http.ts) is the only place that turns it into a response body.
 */

/** Anthropic-style error types; each status has a default one (TYPE_FOR_STATUS). */
export type ErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'billing_error'
  | 'not_found_error'
  | 'conflict_error'
  | 'request_too_large'
  | 'rate_limit_error'
  | 'api_error'
  | 'timeout_error'
  | 'overloaded_error';

/** Default error.type for a status, used when a caller gives only a status. */
export const TYPE_FOR_STATUS: Record<number, ErrorType> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  402: 'billing_error',
  403: 'permission_error',
  404: 'not_found_error',
  405: 'invalid_request_error',
  409: 'conflict_error',
  408: 'timeout_error',
  413: 'request_too_large',
  415: 'invalid_request_error',
  422: 'invalid_request_error',
  423: 'permission_error',
  429: 'rate_limit_error',
  500: 'api_error',
  502: 'api_error',
  503: 'overloaded_error',
  504: 'timeout_error',
  529: 'overloaded_error',
};

export interface GatewayErrorOptions {
  /** Offending field or header, e.g. `messages[2].role`; "" when nothing applies. */
  param?: string;
  /** Overrides the type derived from the status. */
  type?: ErrorType;
  /** Extra response headers (e.g. retry-after). */
  headers?: Record<string, string>;
  /** The underlying error, kept for logs, never rendered. */
  cause?: unknown;
}

export class GatewayError extends Error {
  readonly status: number;
  readonly code: string;
  readonly type: ErrorType;
  readonly param: string;
  readonly headers: Record<string, string>;

  constructor(status: number, code: string, message: string, opts: GatewayErrorOptions = {}) {
    super(message, { cause: opts.cause });
    this.name = 'GatewayError';
    this.status = status;
    this.code = code;
    this.type = opts.type ?? TYPE_FOR_STATUS[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error');
    this.param = opts.param ?? '';
    this.headers = opts.headers ?? {};
  }
}

/** Shorthands for the common cases, so call sites read like the status table. */
export const errors = {
  badRequest: (code: string, message: string, param = '') => new GatewayError(400, code, message, { param }),
  unauthorized: (code: string, message: string) => new GatewayError(401, code, message),
  forbidden: (code: string, message: string, param = '') => new GatewayError(403, code, message, { param }),
  notFound: (code: string, message: string, param = '') => new GatewayError(404, code, message, { param }),
  conflict: (code: string, message: string, param = '') => new GatewayError(409, code, message, { param }),
  quota: (message = 'Quota exhausted') => new GatewayError(402, 'quota_exhausted', message),
  rateLimited: (retryAfterSeconds: number, message = 'Too many requests') =>
    new GatewayError(429, 'rate_limited', message, { headers: { 'retry-after': String(Math.max(1, Math.ceil(retryAfterSeconds))) } }),
  internal: (cause?: unknown) => new GatewayError(500, 'internal_error', 'Internal server error', { cause }),
};

/**
 * `err` and what it wraps (`cause`), outermost first, at most `depth` of them: drivers' errors reach our code
 * wrapped by drizzle ("Failed query: …") or by our own layers, and are recognised by their shape at any of these.
 */
export function causeChain(err: unknown, depth = 4): any[] {
  const out: any[] = [];
  for (let e: any = err; e && out.length < depth; e = e.cause) out.push(e);
  return out;
}

/** Wraps anything thrown into a GatewayError, keeping the cause; unknown throws become 500s. */
export function toGatewayError(err: unknown): GatewayError {
  if (err instanceof GatewayError) return err;
  const value = badValue(err);
  if (value) {
    // One code for both (documented); the message says which: a NUL in a path or text is not a number out of range.
    const message = value === 'text' ? 'A text value in the request holds a character the gateway cannot store (NUL)' : 'A number in the request is outside the range the gateway stores';
    return new GatewayError(400, 'value_out_of_range', message, { cause: err });
  }
  const storage = storageFailure(err);
  if (storage === 'not_done') {
    return new GatewayError(503, 'storage_unavailable', 'The gateway cannot reach its database or cache right now; try again shortly', { cause: err, headers: { 'retry-after': '1' } });
  }
  if (storage === 'unknown') {
    return new GatewayError(503, 'storage_outcome_unknown', 'The gateway lost its database connection while handling this request: if the request changes something, check whether it was made before sending it again', { cause: err });
  }
  return errors.internal(err);
}

/**
 * The database (or Redis) being down, restarting, out of connections or out of disk is not a bug in the request or
 * in our code: a 503, not a 500. Whether the client may simply retry depends on when it failed. Before the statement
 * reached the database (no connection could be made, the server refused new ones, SQLite busy or full, which roll
 * the statement back; an ioredis command refused while offline) that statement did nothing: `not_done`. A connection
 * lost while a statement ran (closed, reset, the server shutting down, an I/O error, an ioredis command whose
 * connection dropped) may have committed it: `unknown`,
 * which a retry of a non-idempotent write (a balance adjustment) could apply twice. Matched by shape through the cause
 * chain, like badValue, so this library loads no driver.
 */
const NOT_DONE_CODES = new Set(['ECONNREFUSED', 'CONNECT_TIMEOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'SQLITE_BUSY', 'SQLITE_FULL']);
const UNKNOWN_CODES = new Set(['CONNECTION_CLOSED', 'CONNECTION_ENDED', 'CONNECTION_DESTROYED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE']);
/** PostgreSQL: cannot connect now (57P03), too many connections (53300), connection refused or rejected (08001, 08004). */
const PG_NOT_DONE = new Set(['57P03', '53300', '08001', '08004']);

function storageFailure(err: unknown): 'not_done' | 'unknown' | null {
  for (const e of causeChain(err)) {
    const code = typeof e.code === 'string' ? e.code : '';
    if (e.name === 'PostgresError') {
      if (PG_NOT_DONE.has(code)) return 'not_done';
      if (code.startsWith('08') || code.startsWith('53') || code === '57P01' || code === '57P02') return 'unknown';
    }
    if (NOT_DONE_CODES.has(code) || code.startsWith('SQLITE_BUSY')) return 'not_done';
    if (UNKNOWN_CODES.has(code) || code.startsWith('SQLITE_IOERR')) return 'unknown';
    if (e.message === "Stream isn't writeable and enableOfflineQueue options is false") return 'not_done';
    if (e.name === 'MaxRetriesPerRequestError' || e.message === 'Connection is closed.') return 'unknown';
  }
  return null;
}

/**
 * PostgreSQL refuses a client's number beyond bigint (SQLSTATE 22003) a malformed one (22P02) or a NUL in text (22021) where
 * SQLite just finds nothing: that is the request's fault, not a 500. Matched by shape (postgres.js
 * PostgresError, possibly wrapped by drizzle as `cause`), so this library loads no driver.
 */
function badValue(err: unknown): 'number' | 'text' | null {
  for (const e of causeChain(err, 3)) {
    if (e.name !== 'PostgresError') continue;
    if (e.code === '22021') return 'text';
    if (e.code === '22003' || e.code === '22P02') return 'number';
  }
  return null;
}
