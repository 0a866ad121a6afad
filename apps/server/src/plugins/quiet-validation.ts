/**
 * Elysia builds every validation error's message with `JSON.stringify` of the offending value (and of
 * all its errors) unless the failing schema node carries its own `error` text. Serialising a hostile
 * body costs time and memory proportional to it, for a message we never send. So every schema node of
 * every route gets a non-enumerable placeholder `error` (invisible to OpenAPI, kept where a route set
 * its own text); the error renderer recognises the placeholder and uses TypeBox's message instead.
 */

/** The placeholder message; never rendered (see `isPlaceholder`). */
const PLACEHOLDER = '\u0000validation';
const KIND = Symbol.for('TypeBox.Kind');

export const isPlaceholder = (customError: unknown) => customError === PLACEHOLDER;

function mark(schema: unknown, seen: Set<object>): void {
  if (!schema || typeof schema !== 'object' || seen.has(schema)) return;
  seen.add(schema);
  const s = schema as Record<string | symbol, unknown>;
  if (KIND in s && s.error === undefined && s.message === undefined) {
    Object.defineProperty(s, 'error', { value: PLACEHOLDER, enumerable: false, configurable: true, writable: true });
  }
  for (const v of Object.values(s)) if (v && typeof v === 'object') mark(v, seen);
}

/** Marks the body, query, params and headers schemas of every route (idempotent). */
export function quietValidation(routes: Array<{ hooks?: Record<string, unknown> }>): void {
  const seen = new Set<object>();
  for (const r of routes) for (const k of ['body', 'query', 'params', 'headers'] as const) mark(r.hooks?.[k], seen);
}
