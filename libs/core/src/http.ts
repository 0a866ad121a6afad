import { GatewayError } from './errors';

/** The error object of both surfaces: all four fields always strings. */
export interface ErrorObject {
  message: string;
  type: string;
  param: string;
  code: string;
}

export type ErrorSurface = 'v1' | 'api';

/**
 * Renders an error body for the surface it is served on: `/v1/*` adds Anthropic's top-level
 * `type:"error"`, `/api/*` adds new-api's `success:false` and `message`.
 */
export function renderErrorBody(err: GatewayError, surface: ErrorSurface, requestId: string): Record<string, unknown> {
  const error: ErrorObject = { message: err.message, type: err.type, param: err.param, code: err.code };
  if (surface === 'v1') return { type: 'error', error, request_id: requestId };
  return { success: false, message: err.message, error, request_id: requestId };
}

/** Picks the error surface from a URL path. */
export function surfaceOf(pathname: string): ErrorSurface {
  return pathname.startsWith('/v1/') || pathname === '/v1' ? 'v1' : 'api';
}

/** A complete JSON error Response (for code paths outside Elysia's error hook, e.g. pre-upgrade). */
export function errorResponse(err: GatewayError, surface: ErrorSurface, requestId: string): Response {
  return new Response(JSON.stringify(renderErrorBody(err, surface, requestId)), {
    status: err.status,
    headers: { 'content-type': 'application/json', 'request-id': requestId, ...err.headers },
  });
}

/** The management API's success envelope. */
export function ok<T>(data: T, message = ''): { success: true; message: string; data: T } {
  return { success: true, message, data };
}
