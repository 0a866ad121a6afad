/**
 * What a management (/api) request body may not carry, found in one walk over it as parsed:
 *
 * - A lone UTF-16 surrogate. JSON may spell one (`"\ud800"`), which JSON.parse keeps in the string, but no UTF-8 text
 *   can hold it: PostgreSQL refused it in a JSON column (misreported as a number out of range) and stored U+FFFD in a
 *   text one, SQLite stored U+FFFD in text and the escape in JSON, so the value saved was silently not the value
 *   sent, and differently per backend.
 * - A key named `__proto__`. JSON.parse keeps it as an own key, but the HTTP layer's body normalizer copies objects
 *   by assignment, and assigning `__proto__` sets the copy's prototype instead of adding a key: a `model_mapping`,
 *   `headers`, `header_policy.beta_rewrite` or `model_limits` entry of that name, or a top-level one, was dropped
 *   without a word (and the copy's prototype pointed at client data). No management field has a use for the name.
 * - A NUL (U+0000) in a key or string: PostgreSQL text and jsonb cannot hold one, SQLite can (see nul-text.ts).
 *   Found in the same walk but ranked last: it is refused later, by a check that first looks at the URL (after
 *   body-shape's), so it is reported (kind `nul_text`) only when the body holds nothing else on this list.
 *
 * A request body is checked once, before any route reads it.
 */

export interface JsonBodyIssue {
  kind: 'unpaired_surrogate' | 'proto_key' | 'nul_text';
  /** `param`-style path (`models[0]`, `model_mapping.x`); '' for the body itself. */
  at: string;
}

const hasNul = (s: string) => s.includes('\u0000');

/**
 * The first key or string of `value`, in document order, holding an unpaired surrogate or (a key) named
 * `__proto__`; else the first holding a NUL (`nul_text`); null when none.
 */
export function jsonBodyIssue(value: unknown): JsonBodyIssue | null {
  const seen: { nulAt: string | null } = { nulAt: null };
  return walk(value, '', seen) ?? (seen.nulAt === null ? null : { kind: 'nul_text', at: seen.nulAt });
}

/** One pass: returns the first hard issue; the first NUL's path is noted in `seen` on the way. */
function walk(value: unknown, at: string, seen: { nulAt: string | null }): JsonBodyIssue | null {
  if (typeof value === 'string') {
    if (!value.isWellFormed()) return { kind: 'unpaired_surrogate', at };
    if (seen.nulAt === null && hasNul(value)) seen.nulAt = at;
    return null;
  }
  if (value === null || typeof value !== 'object') return null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const hit = walk(value[i], `${at}[${i}]`, seen);
      if (hit !== null) return hit;
    }
    return null;
  }
  for (const [k, v] of Object.entries(value)) {
    const path = at ? `${at}.${k}` : k;
    if (k === '__proto__') return { kind: 'proto_key', at: path };
    if (!k.isWellFormed()) return { kind: 'unpaired_surrogate', at: path };
    if (seen.nulAt === null && hasNul(k)) seen.nulAt = path;
    const hit = walk(v, path, seen);
    if (hit !== null) return hit;
  }
  return null;
}
