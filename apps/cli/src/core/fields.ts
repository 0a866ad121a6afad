/**
 * Flags that mirror API fields (`--base-url` ↔ `base_url`), their value parsing, and how they combine
 * with `--json-body` into a request body. Bad values are commander argument errors (exit code 2).
 */
import { InvalidArgumentError, Option, type Command } from 'commander';
import { jsonSyntaxError, UsageError } from './errors';
import type { Ctx } from './context';
import { apiParams } from './params';

export type FieldKind = 'string' | 'int' | 'number' | 'bool' | 'list' | 'int-list' | 'json' | 'time';

/** One API body field exposed as a flag. */
export interface Field {
  /** The API's snake_case name. */
  name: string;
  kind: FieldKind;
  desc: string;
}

/** Parses a whole integer, rejecting `5x`, `1.5` and unsafe sizes. */
export function parseIntStrict(v: string): number {
  if (!/^-?\d+$/.test(v.trim())) throw new InvalidArgumentError('expected an integer.');
  const n = Number(v);
  if (!Number.isSafeInteger(n)) throw new InvalidArgumentError('integer out of range.');
  return n;
}

/** Parses a positive id (`gw channel get 5`). */
export function parseId(v: string): number {
  const n = parseIntStrict(v);
  if (n < 1) throw new InvalidArgumentError('expected a positive id.');
  return n;
}

const PARSERS: Record<FieldKind, (v: string) => unknown> = {
  string: (v) => v,
  int: parseIntStrict,
  number: (v) => {
    const n = Number(v);
    if (v.trim() === '' || !Number.isFinite(n)) throw new InvalidArgumentError('expected a number.');
    return n;
  },
  bool: (v) => {
    const s = v.toLowerCase();
    if (['true', '1', 'yes', 'on'].includes(s)) return true;
    if (['false', '0', 'no', 'off'].includes(s)) return false;
    throw new InvalidArgumentError('expected true or false.');
  },
  list: (v) => v.split(',').map((s) => s.trim()).filter(Boolean),
  'int-list': (v) => v.split(',').map((s) => s.trim()).filter(Boolean).map(parseIntStrict),
  // `never` clears an expiry (null); anything else is a point in time.
  time: (v) => (['never', 'none', 'null'].includes(v.toLowerCase()) ? null : parseTime(v)),
  json: (v) => {
    try { return JSON.parse(v); } catch { throw new InvalidArgumentError('expected JSON, e.g. \'{"a":"b"}\'.'); }
  },
};

const PLACEHOLDER: Record<FieldKind, string> = {
  string: 'text', int: 'n', time: 'time|never', number: 'x', bool: 'true|false', list: 'a,b', 'int-list': '1,2', json: 'json',
};

const flagOf = (name: string) => `--${name.replace(/_/g, '-')}`;

/** Adds one flag per field plus `--json-body <file|->`. */
export function addFields(cmd: Command, fields: Field[]): Command {
  for (const f of fields) {
    cmd.addOption(new Option(`${flagOf(f.name)} <${PLACEHOLDER[f.kind]}>`, f.desc).argParser(PARSERS[f.kind]));
  }
  return cmd.option('--json-body <file|->', 'request body fields as a JSON object from a file or stdin (-); flags override it');
}

/** The option key commander uses for a field (`base_url` → `baseUrl`). */
const attr = (name: string) => name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());

/** Builds the request body: `--json-body` first, then every flag that was given. */
export async function bodyFrom(ctx: Ctx, opts: Record<string, any>, fields: Field[]): Promise<Record<string, unknown>> {
  const body: Record<string, unknown> = opts.jsonBody ? await readJsonBody(ctx, opts.jsonBody) : {};
  for (const f of fields) {
    const v = opts[attr(f.name)];
    if (v !== undefined) body[f.name] = v;
  }
  return body;
}

/** Reads a JSON object from a file path or `-` (stdin). */
export async function readJsonBody(ctx: Ctx, source: string): Promise<Record<string, unknown>> {
  let text: string;
  try {
    text = source === '-' ? await ctx.io.readStdin() : await Bun.file(source).text();
  } catch (e) {
    throw new UsageError(`cannot read --json-body ${source}: ${(e as Error).message}`);
  }
  let v: unknown;
  try { v = JSON.parse(text); } catch (e) { throw new UsageError(`--json-body ${source} is not valid JSON: ${jsonSyntaxError(e)}`); }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new UsageError(`--json-body ${source} must be a JSON object`);
  return v as Record<string, unknown>;
}

/** Refuses an update/create with nothing to send (a likely typo in a script). */
export function requireSome(body: Record<string, unknown>, what: string): void {
  if (Object.keys(body).length === 0) throw new UsageError(`nothing to ${what}: give at least one field flag or --json-body`);
}

/** Adds `--page` / `--page-size` to a list command. */
export function addPaging(cmd: Command): Command {
  cmd
    .addOption(new Option('--page <n>', 'page number, from 1').argParser(parseId))
    .addOption(new Option('--page-size <n>', 'rows per page (1-100)').argParser(parseId));
  // The query calls the page `p`; a server refusal of it names --page.
  return apiParams(cmd, { p: { flag: '--page' }, page_size: { flag: '--page-size', values: '1 to 100' } });
}

/** The list query's paging part (`p`, `page_size`). */
export const pagingQuery = (opts: Record<string, any>) => ({ p: opts.page, page_size: opts.pageSize });

/** Refuses a create whose required fields came neither from flags nor from `--json-body`. */
export function requireFields(body: Record<string, unknown>, names: string[]): void {
  const missing = names.filter((n) => body[n] === undefined);
  if (missing.length) throw new UsageError(`missing required ${missing.map((n) => `--${n.replace(/_/g, '-')}`).join(', ')} (or give them in --json-body)`);
}

/** An ISO 8601 date, optionally with a time (`T` or a space) and then optionally a zone (without one: local time). */
const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/i;

/**
 * A point in time as unix seconds: digits are taken as seconds, otherwise an ISO date or date-time. Only those:
 * `Date.parse` alone took almost anything, and a typo became a date in 2001 with no error (`--expires-at -1`,
 * `1.5`, `Nov 5`, `tomorrow 5`), or rolled an impossible date over into the next month (`2026-02-30`).
 */
export function parseTime(v: string): number {
  const s = v.trim();
  if (/^\d+$/.test(s)) {
    const n = Number(s);
    if (!Number.isSafeInteger(n)) throw new InvalidArgumentError('time out of range.');
    return n;
  }
  const m = ISO_TIME.exec(s);
  const ms = m ? Date.parse(s) : NaN;
  const [y, mo, d] = m ? [Number(m[1]), Number(m[2]), Number(m[3])] : [0, 0, 0];
  const day = new Date(Date.UTC(y, mo - 1, d));
  if (Number.isNaN(ms) || day.getUTCMonth() !== mo - 1 || day.getUTCDate() !== d) {
    throw new InvalidArgumentError('expected unix seconds or an ISO date such as 2026-01-31 or 2026-01-31T12:00:00Z.');
  }
  return Math.floor(ms / 1000);
}
