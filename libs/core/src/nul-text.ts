/**
 * PostgreSQL text and jsonb cannot hold NUL (U+0000); SQLite stores it. A NUL in a management request therefore
 * answered 200 on one backend and 400 `value_out_of_range` on the other (the database refusing the parameter), so
 * /api refuses it up front on both. Relay (/v1) message text may hold NUL and is forwarded untouched. A JSON body's
 * keys and strings are searched in the one walk that checks it for other things (json-body-issue.ts, kind `nul_text`).
 */

const hasNul = (s: string) => s.includes('\u0000');

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
