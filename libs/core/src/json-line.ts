/**
 * One JSON Lines record, newline included. JSON allows U+2028, U+2029 and U+0085 raw inside strings, but Python's
 * `str.splitlines`, many editors and log shippers end a line at each, splitting the record; escaped, every
 * reader sees one line and JSON.parse gives back the same text. (Control characters and lone surrogates
 * JSON.stringify escapes already.)
 */
export function jsonLine(value: unknown): string {
  return `${JSON.stringify(value).replace(/[\u0085\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)}\n`;
}
