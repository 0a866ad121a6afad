import { jsonLine } from '@gw/core';
import type { ExportCursor, UsageLogWhere, UsageStatsStore } from '@gw/db';
import { toUsageLogView, UsageLogView, type UsageLogReader } from './usage-view';

export type ExportFormat = 'csv' | 'jsonl';

/** Rows read per page: big enough to amortise the query, small enough that memory stays flat. */
export const EXPORT_PAGE_ROWS = 1000;

/** CSV columns: the fields of a usage log record, in the order of the API's view. */
export const EXPORT_COLUMNS = Object.keys(UsageLogView.properties) as (keyof UsageLogView)[];

/**
 * One CSV field (RFC 4180): quoted when it holds a comma, quote or line break, quotes doubled. Text that
 * a spreadsheet would run as a formula (= + - @ tab CR LF NUL at the start; model names come from
 * clients) gets a leading apostrophe. A semicolon or tab is quoted too: spreadsheets split on them (locales
 * whose list separator is `;`, LibreOffice's import with its tab and semicolon options), which would start a
 * new cell (`x;=1+1`, or an `ip` forwarded as `1.2.3.4<tab>=1+1`) past the first check. A line break is any
 * that Unicode line readers break at (Python's `str.splitlines`: VT, FF, FS, GS, RS, NEL, U+2028, U+2029, besides
 * CR and LF): unquoted, a reader splitting on them saw a record end inside a field.
 * A lone UTF-16 surrogate has no UTF-8 form: it is written as U+FFFD here, on purpose (JSON Lines keeps every
 * value exactly, a lone surrogate as its `\\uD8xx` escape).
 */
export function csvField(v: unknown): string {
  if (v === null || v === undefined) return '';
  if (Array.isArray(v)) return v.length ? csvField(JSON.stringify(v)) : '';
  if (typeof v !== 'string') return String(v);
  const s = (/^[=+\-@\t\r\n\0]/.test(v) ? `'${v}` : v).toWellFormed();
  return NEEDS_QUOTES.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/** Separators spreadsheets split on, the quote, and every line break a Unicode line reader knows. */
const NEEDS_QUOTES = /[",;\t\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029]/;

const csvLine = (values: unknown[]) => `${values.map(csvField).join(',')}\r\n`;

/**
 * The rows matching `where` as a byte stream, oldest first (created_at, then id), pulled one keyset page at a time: the next page is read
 * only when the consumer has taken the previous one, so a slow client holds one page in memory, not
 * the table. `reader` hides channel details and key ids as the JSON listing does.
 *
 * The first page is read before the stream is returned: a query the database refuses (PostgreSQL: a
 * filter beyond bigint) is then the caller's error answer, not a download cut after its headers.
 * `onEnd` runs once when the export is over: read to its end, failed, or cancelled by the client.
 */
export async function exportUsageLogs(repo: UsageStatsStore, where: UsageLogWhere, format: ExportFormat, reader: UsageLogReader, pageRows = EXPORT_PAGE_ROWS,
  onEnd: () => void = () => {}): Promise<ReadableStream<Uint8Array>> {
  const enc = new TextEncoder();
  let after: ExportCursor | null = null;
  let header = format === 'csv';
  const page = async () => {
    const rows = await repo.exportPage(where, after, pageRows);
    let out = header ? csvLine(EXPORT_COLUMNS) : '';
    header = false;
    for (const row of rows) {
      const v = toUsageLogView(row, reader);
      out += format === 'csv' ? csvLine(EXPORT_COLUMNS.map((c) => v[c])) : jsonLine(v);
    }
    const last = rows.length < pageRows;
    if (!last) after = { createdAt: rows[rows.length - 1]!.createdAt, id: rows[rows.length - 1]!.id };
    return { out, last };
  };
  let ended = false;
  const end = () => { if (!ended) { ended = true; onEnd(); } };
  let first: { out: string; last: boolean } | null;
  try {
    first = await page();
  } catch (err) {
    end();
    throw err;
  }
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { out, last } = first ?? await page();
        first = null;
        if (out) controller.enqueue(enc.encode(out));
        if (last) { controller.close(); end(); }
      } catch (err) {
        end();
        throw err;
      }
    },
    cancel: end,
  }, { highWaterMark: 1 });
}
