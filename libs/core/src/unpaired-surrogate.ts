/**
 * JSON may spell a lone UTF-16 surrogate (`"\ud800"`), which JSON.parse keeps in the string, but no UTF-8 text
 * can hold one: PostgreSQL refused it in a JSON column (misreported as a number out of range) and stored U+FFFD
 * in a text one, SQLite stored U+FFFD in text and the escape in JSON, so the value saved was silently not the
 * value sent, and differently per backend. A request body is checked once, before any route reads it.
 */

/** `param`-style path (`models[0]`, `model_mapping.x`) of the first key or string holding a lone surrogate, or null. */
export function unpairedSurrogateAt(value: unknown, at = ''): string | null {
  if (typeof value === 'string') return value.isWellFormed() ? null : at;
  if (value === null || typeof value !== 'object') return null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const hit = unpairedSurrogateAt(value[i], `${at}[${i}]`);
      if (hit !== null) return hit;
    }
    return null;
  }
  for (const [k, v] of Object.entries(value)) {
    const path = at ? `${at}.${k}` : k;
    if (!k.isWellFormed()) return path;
    const hit = unpairedSurrogateAt(v, path);
    if (hit !== null) return hit;
  }
  return null;
}
