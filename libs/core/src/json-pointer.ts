/**
 * JSON-pointer helpers for validation errors: TypeBox reports `/messages/0/role`, the API's
 * `error.param` says `messages[0].role`.
 */

/** `/messages/0/role` → `messages[0].role` (RFC 6901 escapes ~1 and ~0 undone). */
export function pointerToParam(pointer: string): string {
  return pointer.split('/').filter(Boolean).map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((acc, seg) => (/^\d+$/.test(seg) ? `${acc}[${seg}]` : acc ? `${acc}.${seg}` : seg), '');
}

/** The value a pointer designates in `root`, or undefined (e.g. a missing required field). */
export function valueAt(root: unknown, pointer: string): unknown {
  let v: any = root;
  for (const seg of pointer.split('/').filter(Boolean)) {
    if (v === null || typeof v !== 'object') return undefined;
    v = v[seg.replace(/~1/g, '/').replace(/~0/g, '~')];
  }
  return v;
}
