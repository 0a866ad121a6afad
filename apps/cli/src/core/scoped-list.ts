/**
 * List commands over records that admins see for everyone and users see for themselves (usage logs,
 * ledger, top-up orders). One description per command (filters, their query fields, columns) builds the
 * command: `--self` forces the caller's own records, and without it a non-admin gets their own records
 * too instead of an `insufficient_role` refusal (the role comes from GET /api/user/self, once per run).
 */
import { Option, type Command } from 'commander';
import type { App, Ctx } from './context';
import { ApiError, UsageError } from './errors';
import { addPaging, pagingQuery } from './fields';
import { pageText, type Column } from './output';
import { apiParams } from './params';

/** Role number from which the admin routes answer. */
const ADMIN_ROLE = 10;

/** One filter flag and the query field it sets. */
export interface Filter {
  /** Flag with its value placeholder, e.g. `--user-id <id>`. */
  flags: string;
  desc: string;
  /** The API's query field, e.g. `user_id`. */
  query: string;
  parse?: (v: string) => unknown;
  choices?: readonly string[];
  /** Only the admin route takes it. */
  adminOnly?: boolean;
}

export interface ScopedList {
  /** Plural noun for help texts ("usage logs"). */
  what: string;
  adminPath: string;
  selfPath: string;
  filters: Filter[];
  columns: Column[];
  examples: string[];
}

const attrOf = (o: Option) => o.attributeName();

/** Adds `list` to `group` as described. */
export function addScopedList(group: Command, app: App, spec: ScopedList): Command {
  const cmd = group.command('list')
    .description(`List ${spec.what}: everyone's for admins, your own otherwise (or with --self)`)
    .option('--self', 'only your own (the default for non-admins)');
  const options = addFilters(cmd, spec.filters);
  addPaging(cmd);
  // Query fields named differently from their flag (`token_id` ← `--key-id`).
  apiParams(cmd, Object.fromEntries(options.map(({ f, o }) => [f.query, { flag: o.long!, values: f.choices?.join(', ') }])));
  cmd.addHelpText('after', `\nExamples:\n${spec.examples.map((e) => `  $ ${e}`).join('\n')}`);
  cmd.action(app.action(async (ctx, _a, opts) => {
    const { path, query } = await scopedQuery(ctx, spec, options, opts);
    const data = await ctx.client().call('GET', path, { query: { ...pagingQuery(opts), ...query } });
    ctx.print(data, () => pageText(data, spec.columns));
  }));
  return cmd;
}

/** Adds the filter flags of `spec` to `cmd`; pass the result to `scopedQuery`. */
export function addFilters(cmd: Command, filters: Filter[]): { f: Filter; o: Option }[] {
  return filters.map((f) => {
    const o = new Option(f.flags, f.adminOnly ? `${f.desc} (admins)` : f.desc);
    if (f.parse) o.argParser(f.parse);
    if (f.choices) o.choices(f.choices);
    cmd.addOption(o);
    return { f, o };
  });
}

/**
 * The route (admin or self) and query for the given filter flags: `--self`, or a caller below admin,
 * means the caller's own records; admin-only filters are then refused rather than silently dropped.
 */
export async function scopedQuery(ctx: Ctx, spec: Pick<ScopedList, 'what' | 'adminPath' | 'selfPath'>, options: { f: Filter; o: Option }[], opts: Record<string, any>) {
  const given = options.filter(({ o }) => opts[attrOf(o)] !== undefined);
  const adminOnly = given.filter(({ f }) => f.adminOnly).map(({ o }) => o.long!);
  let self = Boolean(opts.self);
  if (self && adminOnly.length) throw new UsageError(`${adminOnly.join(', ')} cannot be combined with --self`);
  if (!self) {
    self = Number((await ctx.self()).role) < ADMIN_ROLE;
    if (self && adminOnly.length) {
      throw new ApiError(403, 'insufficient_role', `${adminOnly.join(', ')} needs the admin role; without it you see your own ${spec.what}`);
    }
  }
  const query: Record<string, any> = {};
  for (const { f, o } of given) query[f.query] = opts[attrOf(o)];
  return { self, path: self ? spec.selfPath : spec.adminPath, query };
}
