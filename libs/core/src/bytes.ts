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

/** A part at least this large is written on its own: one more write costs less than copying it (measured). */
export const SEPARATE_WRITE_BYTES = 16 * 1024;

/**
 * Parts regrouped for writing, in order: each run of small parts joined into one array (one write for
 * many pieces), each part of `big` bytes or more left as it is (a view, never copied). Joining every part
 * into one array per write copied each upstream chunk once more, which was most of the gateway's CPU
 * while streams filled slow readers' sockets (bench/slow-readers.ts). One part or none: `parts` itself.
 */
export function coalesceBytes(parts: Uint8Array[], big = SEPARATE_WRITE_BYTES): Uint8Array[] {
  if (parts.length <= 1) return parts;
  const out: Uint8Array[] = [];
  let run: Uint8Array[] = [];
  for (const p of parts) {
    if (p.byteLength < big) {
      run.push(p);
      continue;
    }
    if (run.length) out.push(concatBytes(run)!);
    run = [];
    out.push(p);
  }
  if (run.length) out.push(concatBytes(run)!);
  return out;
}
