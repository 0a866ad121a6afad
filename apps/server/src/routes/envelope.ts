import { replaceSchemaType, t, type TSchema } from 'elysia';
import { Type } from '@sinclair/typebox';
import { MAX_INPUT_INTEGER } from '@gw/core/id-input';

/** The management success envelope `{success, message, data}` around a data schema (for OpenAPI). */
export const envelope = <T extends TSchema>(data: T) =>
  t.Object({ success: t.Literal(true), message: t.String(), data });

/** A page of items, as every list endpoint returns it. */
export const page = <T extends TSchema>(item: T) =>
  t.Object({ items: t.Array(item), total: t.Integer(), page: t.Integer(), page_size: t.Integer() });

/**
 * Query parameters of every list endpoint (`p` is 1-based, new-api style). `p` is bounded so the row
 * offset stays an exact integer SQLite accepts (1e308 would otherwise reach the database as a float).
 */
export const MAX_PAGE = 1_000_000;
export const pageQuery = {
  p: t.Optional(t.Integer({ minimum: 1, maximum: MAX_PAGE, default: 1 })),
  page_size: t.Optional(t.Integer({ minimum: 1, maximum: 100, default: 20 })),
};

/**
 * A library's query schema (plain TypeBox) as a route's query schema: integers also accept their decimal
 * string form, as Elysia's `t.Integer` does (Elysia coerces only its own types in query strings).
 */
export const queryOf = <T extends TSchema>(schema: T): T =>
  replaceSchemaType(schema, { from: Type.Integer(), to: (s) => t.Integer(s as any) }) as T;

/**
 * An id in a path or query string (decimal digits, 1..2^53 − 1): past that it cannot name a row, and the backends
 * answered it differently (see `@gw/core/id-input`), so it is 400 `out_of_range` naming the parameter.
 */
export const idInput = (options: { description?: string } = {}) => t.Integer({ minimum: 1, maximum: MAX_INPUT_INTEGER, ...options });
/** `/:id` of every route that takes one. */
export const idParams = t.Object({ id: idInput() });
/** Unix seconds in a query string (0..2^53 − 1). */
export const unixSecondsInput = (description: string) => t.Integer({ minimum: 0, maximum: MAX_INPUT_INTEGER, description });
