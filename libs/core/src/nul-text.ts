/**
 * PostgreSQL text and jsonb cannot hold NUL (U+0000); SQLite stores it. A NUL in a management request therefore
 * answered 200 on one backend and 400 `value_out_of_range` on the other (the database refusing the parameter), so
 * /api refuses it up front on both. Relay (/v1) message text may hold NUL and is forwarded untouched.
 */

const hasNul = (s: string) => s.includes('\u0000');

/** `param`-style path (`models[0]`, `headers.x`) of the first key or string holding a NUL, or null. */
export function nulTextAt(value: unknown, at = ''): string | null {
  if (typeof value === 'string') return hasNul(value) ? at : null;
  if (value === null || typeof value !== 'object') return null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const hit = nulTextAt(value[i], `${at}[${i}]`);
      if (hit !== null) return hit;
    }
    return null;
  }
  for (const [k, v] of Object.entries(value)) {
    const path = at ? `${at}.${k}` : k;
    if (hasNul(k)) return path;
    const hit = nulTextAt(v, path);
    if (hit !== null) return hit;
  }
  return null;
}

/** The name of the first path parameter, query key or query value (its key) holding a NUL, or null. */
export function nulInRequestAt(url: string, params: Record<string, unknown> | undefined): string | null {
  for (const [k, v] of Object.entries(params ?? {})) {
    if (typeof v === 'string' && (hasNul(v) || hasNul(safeDecode(v)))) return k;
  }
  const q = url.indexOf('?');
  if (q < 0 || !url.includes('%00', q)) return null; // a raw NUL cannot reach us in a URL, only its escape
  for (const [k, v] of new URLSearchParams(url.slice(q + 1))) if (hasNul(k) || hasNul(v)) return k;
  return null;
}

const safeDecode = (s: string) => { try { return decodeURIComponent(s); } catch { return s; } };
