/**
 * Server errors in the CLI's own terms. The server names API fields (`page_size`, `allow_negative`);
 * the operator typed flags (`--page-size`, `--allow-negative`). Each command's table maps one to the
 * other: its own options by name (`--base-url` ↔ `base_url`), plus explicit entries for flags whose
 * field has another name (`--from` ↔ `start_timestamp`) or values that are not given by a flag.
 */
import type { Command } from 'commander';
import type { ApiError } from './errors';

/** How an API field is set from the command line, and which values it takes. */
export interface ParamHint {
  /** The flag, or a short phrase when no flag sets it ("the current password (prompted, or --password-stdin)"). */
  flag: string;
  /** Allowed values, named when the server's message does not (e.g. "Expected union value"). */
  values?: string;
}

const explicit = new WeakMap<Command, Record<string, ParamHint>>();

/** Adds API field → flag entries to a command's table (merged with earlier ones). */
export function apiParams<C extends Command>(cmd: C, table: Record<string, ParamHint>): C {
  explicit.set(cmd, { ...explicit.get(cmd), ...table });
  return cmd;
}

/** The command's whole table: explicit entries first, then every long option by its snake_case name. */
export function paramTable(cmd: Command): Record<string, ParamHint> {
  const table: Record<string, ParamHint> = {};
  for (const o of cmd.options) {
    if (!o.long || o.long === '--json-body') continue;
    const field = o.long.slice(2).replace(/-/g, '_');
    table[field] = { flag: o.long, values: o.argChoices?.join(', ') };
  }
  return { ...table, ...explicit.get(cmd) };
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * Rewrites a server error for the operator: the offending field becomes its flag, snake_case field
 * names in the text become flags (`send allow_negative: true` → `send --allow-negative`), allowed values
 * are named, and a `retry-after` wait is shown. Plain words are never rewritten: "provider" in prose is
 * not the `--provider` flag, so only the leading `field:` and snake_case identifiers are touched.
 */
export function inCliTerms(e: ApiError, table: Record<string, ParamHint>): { message: string; flag?: string } {
  let msg = e.message;
  const top = e.param.split(/[.[]/)[0] ?? '';
  const hint = top ? table[top] : undefined;
  for (const [field, h] of Object.entries(table)) {
    if (!field.includes('_')) continue;
    msg = msg.replace(new RegExp(`\\b${escape(field)}(: ?true)?\\b`, 'g'), h.flag);
  }
  if (hint) {
    const lead = `${top}: `;
    if (msg.startsWith(lead)) msg = `${hint.flag}: ${msg.slice(lead.length)}`;
    else if (!msg.includes(hint.flag)) msg = `${hint.flag}: ${msg}`;
    if (hint.values && !msg.includes(hint.values)) msg += ` (allowed: ${hint.values})`;
  }
  if (e.retryAfter !== undefined) msg += ` (retry after ${e.retryAfter} s)`;
  return { message: msg, flag: hint?.flag };
}
