/**
 * No NUL (U+0000) in a management request: PostgreSQL text and jsonb cannot hold one while SQLite can, so the
 * same request answered 200 on one backend and 400 `value_out_of_range` on the other. A path parameter, query key
 * or value, or any string or key of an /api JSON body holding a NUL is a 400 `invalid_format` naming it, raised with
 * the other body refusals (after credentials and role). Relay (/v1) bodies are not checked: NUL in message text is
 * the client's to send; what the relay stores from a request is made safe where it is written.
 */
import { Elysia } from 'elysia';
import { GatewayError, nulInRequestAt } from '@gw/core';
import { bodyErrors } from './http-errors';
import { bodyNulAt } from './front-door';

const refusal = (param: string, where: string) => new GatewayError(400, 'invalid_format',
  `${param || where}: text holds a NUL character (U+0000), which cannot be stored`, { param });

export const nulText = () => new Elysia({ name: 'nul-text' }).onTransform({ as: 'global' }, ({ request, route, params }) => {
  if (!route.startsWith('/api/') || bodyErrors.has(request)) return;
  const inUrl = nulInRequestAt(request.url, params as Record<string, unknown> | undefined);
  if (inUrl !== null) return void bodyErrors.set(request, refusal(inUrl, 'query'));
  // The body was searched by the front door's one walk over it (jsonBodyIssue): only its finding is read here.
  const inBody = bodyNulAt(request);
  if (inBody !== undefined) bodyErrors.set(request, refusal(inBody, 'body'));
});
