/**
 * Human-readable rendering: aligned tables and key/value blocks. Machine output (`--json`) bypasses
 * all of this and prints the API's `data` unchanged.
 */

/** One table column: a header and how to read the cell from a row. */
export interface Column<T = any> {
  header: string;
  get: (row: T) => unknown;
  /** Right-align (numbers). */
  right?: boolean;
}

/** Shorthand for a column reading one field, formatted by `fmt`. */
export function col<T = any>(header: string, field: string, opts: { right?: boolean; fmt?: (v: unknown) => string } = {}): Column<T> {
  return { header, right: opts.right, get: (r: any) => (opts.fmt ? opts.fmt(r?.[field]) : r?.[field]) };
}

/**
 * Characters that drive a terminal or reorder or hide what it shows: C0 controls other than newline (ESC starts
 * CSI/OSC sequences such as an OSC 52 clipboard write; CR and backspace overwrite what was printed), DEL, C1
 * controls, the Unicode line and paragraph separators, and every invisible format character (\p{Cf}): the
 * bidirectional overrides, embeddings, isolates and marks (a name with U+202E shows the rest of its line reversed),
 * zero-width spaces, word joiners, the BOM, soft hyphens and the tag characters U+E0000–E007F, which show nothing
 * at all and so carry text the operator cannot see (in a name pasted on into a chat with an AI assistant, read
 * by it as instructions). So is every other default-ignorable character (Unicode's own list of what renders as
 * nothing): the variation selectors U+FE00–FE0F and U+E0100–E01EF carry a byte each ("emoji smuggling"), the
 * combining grapheme joiner and the Hangul fillers. The zero-width joiner and non-joiner stay (scripts such as
 * Persian and emoji sequences need them to render), and so do the text and emoji presentation selectors U+FE0E/FE0F.
 */
// eslint-disable-next-line no-control-regex
const UNSAFE = /(?![\u200c\u200d\ufe0e\ufe0f])[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u2028\u2029\p{Cf}\p{Default_Ignorable_Code_Point}]/gu;

/**
 * For the terminal, one variation selector right after a visible character stays: Mongolian (free variation
 * selectors) and Japanese names (ideographic variation sequences, `葛\u{E0100}`) need it to show as written, and it
 * carries one byte per visible character. Every other selector (a run, or one after nothing visible) is blanked.
 */
// eslint-disable-next-line no-control-regex
const TERMINAL_UNSAFE = /(?![\u200c\u200d\u180b-\u180d\u180f\ufe00-\ufe0f\u{e0100}-\u{e01ef}])[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u2028\u2029\p{Cf}\p{Default_Ignorable_Code_Point}]/gu;
const LONE_SELECTOR = /(?<![^\s\p{C}\p{Default_Ignorable_Code_Point}])[\u180b-\u180d\u180f\ufe00-\ufe0f\u{e0100}-\u{e01ef}]/gu;

/** Text for the terminal: every unsafe character (see UNSAFE, TERMINAL_UNSAFE) becomes a space; newlines stay. */
export const terminalText = (s: string): string => s.replace(LONE_SELECTOR, ' ').replace(TERMINAL_UNSAFE, ' ');

/**
 * Someone else's text inside one line of ours (a cell, an `error:` line, a secret printed once): unsafe characters
 * and newlines become spaces. A newline kept would let the text print a line of its own that looks like the CLI's
 * (`error: bad\nok: done` shows an `ok:` line) and breaks "one line per error" for scripts.
 */
export const oneLine = (s: string): string => terminalText(s).replace(/\n/g, ' ');

/**
 * `JSON.stringify` with the unsafe characters it leaves raw (DEL, C1, format characters, U+2028/9) written as
 * `\uXXXX` escapes: the same JSON value, but harmless when printed to a terminal. Outside strings JSON text
 * holds only ASCII structure, so every such character is inside a string, where the escape is valid.
 */
export function jsonText(data: unknown, indent?: number): string {
  // A tag character is two UTF-16 units: each is escaped (a surrogate pair in escapes is the same character).
  return (JSON.stringify(data, null, indent) ?? 'null').replace(UNSAFE, (c) =>
    Array.from({ length: c.length }, (_, i) => `\\u${c.charCodeAt(i).toString(16).padStart(4, '0')}`).join(''));
}

/** Renders a cell on one line: no terminal-driving characters (see UNSAFE) nor newlines, '-' for empty. */
export function cell(v: unknown): string {
  if (v === null || v === undefined || v === '') return '-';
  let s: string;
  if (typeof v === 'boolean') s = v ? 'yes' : 'no';
  else if (Array.isArray(v)) s = v.length ? v.map((x) => (typeof x === 'object' ? JSON.stringify(x) : String(x))).join(',') : '-';
  else if (typeof v === 'object') s = Object.keys(v).length ? JSON.stringify(v) : '-';
  else s = String(v);
  return oneLine(s);
}

/** Unix seconds → `YYYY-MM-DD HH:MM:SS` (UTC), '-' for none. */
export function time(v: unknown): string {
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) return '-';
  return new Date(v * 1000).toISOString().replace('T', ' ').slice(0, 19);
}

/** Display width, counting wide (CJK, emoji) characters as two columns. */
function width(s: string): number {
  let w = 0;
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    w += (c >= 0x1100 && (c <= 0x115f || (c >= 0x2e80 && c <= 0xa4cf) || (c >= 0xac00 && c <= 0xd7a3) || (c >= 0xf900 && c <= 0xfaff) || (c >= 0xfe30 && c <= 0xfe4f) || (c >= 0xff00 && c <= 0xff60) || (c >= 0xffe0 && c <= 0xffe6) || (c >= 0x1f300 && c <= 0x1faff) || (c >= 0x20000 && c <= 0x3fffd))) ? 2 : 1;
  }
  return w;
}

function pad(s: string, w: number, right = false): string {
  const fill = ' '.repeat(Math.max(0, w - width(s)));
  return right ? fill + s : s + fill;
}

/** An aligned table with a header row; `(none)` when there are no rows. */
export function table<T>(rows: T[], columns: Column<T>[]): string {
  if (rows.length === 0) return '(none)\n';
  const cells = rows.map((r) => columns.map((c) => cell(c.get(r))));
  const widths = columns.map((c, i) => Math.max(width(c.header), ...cells.map((row) => width(row[i]!))));
  const line = (vals: string[], header = false) =>
    vals.map((v, i) => pad(v, widths[i]!, !header && columns[i]!.right)).join('  ').trimEnd();
  return [line(columns.map((c) => c.header), true), ...cells.map((r) => line(r))].join('\n') + '\n';
}

/** A vertical `key  value` block for one object. */
export function details(pairs: [string, unknown][]): string {
  const w = Math.max(...pairs.map(([k]) => width(k)));
  return pairs.map(([k, v]) => `${pad(k, w)}  ${cell(v)}`).join('\n') + '\n';
}

/** The footer under a list page. */
export function pageFooter(p: { total: number; page: number; page_size: number }): string {
  const pages = Math.max(1, Math.ceil(p.total / Math.max(1, p.page_size)));
  return `page ${p.page}/${pages}, ${p.total} total\n`;
}

export const ROLE_NAMES: Record<number, string> = { 1: 'user', 10: 'admin', 100: 'root' };
/** Role number → name (`admin`), or the number when unknown. */
export const roleName = (v: unknown) => ROLE_NAMES[v as number] ?? String(v ?? '-');
/** Common status numbers (1 enabled, 2 disabled, 3 auto-disabled). */
export const statusName = (v: unknown) => ({ 1: 'enabled', 2: 'disabled', 3: 'auto-disabled' } as Record<number, string>)[v as number] ?? String(v ?? '-');

/** A list page as a table plus footer (`--json`: the page object itself). */
export function pageText<T>(data: { items: T[]; total: number; page: number; page_size: number }, columns: Column<T>[]): string {
  return table(data.items, columns) + (data.items.length || data.total ? pageFooter(data) : '');
}
