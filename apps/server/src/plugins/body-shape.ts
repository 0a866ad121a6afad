/**
 * A body field of the wrong kind is refused as it was sent. Elysia copies a body's declared fields into a fresh
 * object shaped by the schema (its "exact mirror") before checking it, and the copy hides the mistake: a string
 * or number where an object or record belongs became `{}` or `{"0": "x"}`, so `PUT /api/channel/` with
 * `"headers": "x"` or `"failure_rules": 1` answered 200 and replaced the channel's headers or rules. Here the
 * route's own body schema checks the body as parsed, before that copy; only values of the wrong type count
 * (missing fields and unknown ones are left to Elysia as before: defaults still apply, unknown fields are dropped).
 */
import { Elysia } from 'elysia';
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import { ValueErrorType } from '@sinclair/typebox/errors';
import type { TSchema } from '@sinclair/typebox';
import { bodyErrors, validationError } from './http-errors';

type Route = { method: string; path: string; hooks?: { body?: unknown } };

const checkers = new WeakMap<object, TypeCheck<TSchema> | null>();
/** The schema compiled once; null when it cannot be compiled alone (a named model), which Elysia still checks. */
const checkerOf = (schema: TSchema) => {
  if (!checkers.has(schema)) {
    let c: TypeCheck<TSchema> | null = null;
    try { c = TypeCompiler.Compile(schema); } catch { /* left to Elysia */ }
    checkers.set(schema, c);
  }
  return checkers.get(schema) ?? null;
};

export const bodyShape = (routes: () => Route[]) => {
  let byRoute: Map<string, TSchema> | null = null;
  const schemaOf = (method: string, route: string) => {
    byRoute ??= new Map(routes().filter((r) => r.hooks?.body).map((r) => [`${r.method} ${r.path}`, r.hooks!.body as TSchema]));
    return byRoute.get(`${method} ${route}`);
  };
  return new Elysia({ name: 'body-shape' }).onTransform({ as: 'global' }, ({ request, route, body }) => {
    // Only management routes declare body schemas; the relay's hot path pays one prefix check.
    if (body === undefined || !route.startsWith('/api/') || bodyErrors.has(request)) return;
    const schema = schemaOf(request.method, route);
    // A body named by a model (a string) is Elysia's alone; a WeakMap would throw on it.
    if (!schema || typeof schema !== 'object') return;
    const checker = checkerOf(schema);
    if (!checker || checker.Check(body)) return;
    for (const ve of checker.Errors(body)) {
      if (ve.value === undefined || ve.type === ValueErrorType.ObjectRequiredProperty || ve.type === ValueErrorType.ObjectAdditionalProperties) continue;
      bodyErrors.set(request, validationError({ valueError: ve, value: body, customError: (ve.schema as { error?: unknown }).error }, 'body', request));
      return;
    }
  });
};
