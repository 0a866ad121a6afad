/**
 * A channel's overrides compiled once, when the channel is loaded or changed: the entries that apply to
 * each model it serves are picked then, so a request only runs its own list (none: no work at all).
 * Applying is copy-on-write: the client's body is never changed, and an entry that changes nothing
 * (a set to the same value, a remove of an absent field, a clamp of a value in range) is not reported.
 */
import type { ChannelOverride } from '@gw/db';

/** What the overrides did to one request. */
export interface OverrideResult<T> {
  /** The body to send: the same object when no body entry changed anything. */
  body: T;
  /** `op:target` of every entry that changed something, in order, without repeats (the usage log's list). */
  changed: string[];
}

/** The upstream headers a request would carry besides the adapter's own: channel headers and forwarded client headers. */
export interface OverridableHeaders {
  extra: Record<string, string>;
  forwarded: Record<string, string>;
}

/** The entries that apply to one model. */
export interface ModelOverrides {
  /** True when a body entry touches a field that is measured as input (system, tools, ...): the request must be re-measured. */
  readonly touchesInput: boolean;
  applyBody<T extends object>(body: T, changed: string[]): T;
  /** Header entries; returns new maps when something changed (the inputs are never modified). */
  applyHeaders(h: OverridableHeaders, changed: string[]): OverridableHeaders;
}

export interface OverrideProgram {
  /** The entries for `model`, or null when none apply. */
  forModel(model: string): ModelOverrides | null;
}

/** Request fields measured as input tokens (see @gw/formats measureRequestTokens). */
const MEASURED = new Set(['system', 'messages', 'tools', 'mcp_servers']);

/** Compiles the stored entries; null when there are none (the relay then skips overrides entirely). */
export function compileOverrides(entries: ChannelOverride[] | null | undefined, models: string[], mapping: Record<string, string>): OverrideProgram | null {
  if (!entries?.length) return null;
  const build = (model: string): ModelOverrides | null => {
    const upstream = mapping[model] ?? model;
    const list = entries.filter((e) => !e.models || e.models.some((p) => matches(p, model) || matches(p, upstream)));
    return list.length ? new CompiledList(list) : null;
  };
  const byModel = new Map<string, ModelOverrides | null>();
  for (const m of models) byModel.set(m, build(m));
  return { forModel: (model) => (byModel.has(model) ? byModel.get(model)! : build(model)) };
}

/** An exact name, or a prefix when the pattern ends with `*`. */
export function matches(pattern: string, model: string): boolean {
  return pattern.endsWith('*') ? model.startsWith(pattern.slice(0, -1)) : pattern === model;
}

class CompiledList implements ModelOverrides {
  readonly touchesInput: boolean;
  private readonly body: Array<ChannelOverride & { segs: string[]; label: string }>;
  private readonly headers: Array<ChannelOverride & { label: string }>;

  constructor(list: ChannelOverride[]) {
    this.body = list.filter((e) => e.path !== undefined).map((e) => ({ ...e, segs: e.path!.split('.'), label: `${e.op}:${e.path}` }));
    this.headers = list.filter((e) => e.name !== undefined).map((e) => ({ ...e, label: `${e.op}:${e.name}` }));
    this.touchesInput = this.body.some((e) => MEASURED.has(e.segs[0]!));
  }

  applyBody<T extends object>(body: T, changed: string[]): T {
    if (!this.body.length) return body;
    let root = body as Record<string, unknown>;
    // Objects already copied for this request: each is copied at most once, however many entries touch it.
    const own = new Set<object>();
    const writable = (parent: Record<string, unknown> | null, key: string | null, obj: Record<string, unknown>) => {
      if (own.has(obj)) return obj;
      const copy = { ...obj };
      own.add(copy);
      if (parent) parent[key!] = copy;
      else root = copy;
      return copy;
    };
    for (const e of this.body) {
      // Walk to the parent; a missing or non-object parent means the entry does not apply to this request.
      const last = e.segs[e.segs.length - 1]!;
      let parent: Record<string, unknown> | null = root;
      for (let i = 0; i < e.segs.length - 1 && parent; i++) {
        const v: unknown = parent[e.segs[i]!];
        parent = v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
      }
      if (!parent) continue;
      const has = Object.hasOwn(parent, last);
      const cur = has ? parent[last] : undefined;
      let next: unknown;
      if (e.op === 'remove') {
        if (!has) continue;
      } else if (e.op === 'set') {
        if (has && Bun.deepEquals(cur, e.value, true)) continue;
        next = e.value !== null && typeof e.value === 'object' ? structuredClone(e.value) : e.value;
      } else {
        if (typeof cur !== 'number') continue;
        next = Math.min(Math.max(cur, e.min ?? -Infinity), e.max ?? Infinity);
        if (next === cur) continue;
      }
      // Copy the path from the root down, then change the copy of the parent.
      let p = writable(null, null, root);
      for (let i = 0; i < e.segs.length - 1; i++) p = writable(p, e.segs[i]!, p[e.segs[i]!] as Record<string, unknown>);
      if (e.op === 'remove') delete p[last];
      else p[last] = next;
      if (!changed.includes(e.label)) changed.push(e.label);
    }
    return root as T;
  }

  applyHeaders(h: OverridableHeaders, changed: string[]): OverridableHeaders {
    let out = h;
    for (const e of this.headers) {
      const inExtra = Object.hasOwn(out.extra, e.name!);
      const inForwarded = Object.hasOwn(out.forwarded, e.name!);
      if (e.op === 'set_header') {
        // Channel headers are applied last by every adapter: setting there wins over a forwarded one.
        if (inExtra && out.extra[e.name!] === e.value) continue;
        if (!inExtra && inForwarded && out.forwarded[e.name!] === e.value) continue;
        out = { extra: { ...out.extra, [e.name!]: e.value as string }, forwarded: out.forwarded };
      } else {
        if (!inExtra && !inForwarded) continue;
        const extra = { ...out.extra };
        const forwarded = { ...out.forwarded };
        delete extra[e.name!];
        delete forwarded[e.name!];
        out = { extra, forwarded };
      }
      if (!changed.includes(e.label)) changed.push(e.label);
    }
    return out;
  }
}

/**
 * The minimal request of a channel test or health probe (`max_tokens` 1, one "ping"), as the channel sends
 * requests: its overrides applied, so a channel that needs a header or a body setting is not judged broken
 * without it. Entries on `max_tokens` are left out: a probe stays one token, whatever a channel sets.
 */
export function probeRequest(ch: { overrides: OverrideProgram | null; headers: Record<string, string> }, model: string): {
  body: { model: string; max_tokens: number; messages: Array<{ role: 'user'; content: string }> };
  extraHeaders: Record<string, string>;
} {
  const base = { model, max_tokens: 1, messages: [{ role: 'user' as const, content: 'ping' }] };
  const ov = ch.overrides?.forModel(model);
  if (!ov) return { body: base, extraHeaders: ch.headers };
  const body = { ...ov.applyBody(base, []), max_tokens: 1 };
  return { body, extraHeaders: ov.applyHeaders({ extra: ch.headers, forwarded: {} }, []).extra };
}
