/** Byte arrays as one: the part itself when there is one (no copy), null when there are none. */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array | null {
  if (parts.length <= 1) return parts[0] ?? null;
  let n = 0;
  for (const p of parts) n += p.byteLength;
  const out = new Uint8Array(n);
  n = 0;
  for (const p of parts) {
    out.set(p, n);
    n += p.byteLength;
  }
  return out;
}
