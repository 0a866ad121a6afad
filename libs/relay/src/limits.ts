/**
 * Request limits per key, per user and per group, on the RateLimits port (in-process today, Redis when
 * several nodes share the limits): requests per minute and tokens per minute with `hit`, requests in
 * flight with `acquire`/`release` leases. 0 = unlimited for every field.
 *
 * Order: concurrency first, then requests per minute, then tokens per minute, each key → user → group.
 * A refused request gives back everything it took: the leases, and the units earlier windows counted
 * (otherwise requests refused by a key's own limit spent its owner's and group's windows for the others).
 *
 * Per-model limits (`modelLimits`: pattern → the same three limits) count apart from the general ones,
 * one counter per pattern, so `claude-*` limits every claude model together. Of a scope's patterns only
 * the most specific applies (the exact name, else the longest matching prefix); each scope's model limit
 * is checked right after its general one.
 *
 * Tokens per minute count what admission reserves (the input bound plus max_tokens), not what the
 * upstream later reports: the limit can then never be exceeded by requests already admitted, at the
 * price of counting unused output. Nothing is refunded at settlement; only a request refused before any
 * upstream was called (quota, price, unknown model) gives its tokens back (`Admission.unused`): counted,
 * they let a member who cannot pay fill a group's window with refused requests, for free.
 */
import { GatewayError, type Lease, type RateLimits } from '@gw/core';

/** The limit fields of a key, a user or a group. */
export interface LimitFields {
  rateLimitRpm: number;
  rateLimitTpm: number;
  maxConcurrency: number;
  /** Pattern (model name, or prefix ending in `*`) → limits; absent or null = none. */
  modelLimits?: Record<string, Omit<LimitFields, 'modelLimits'>> | null;
}

/**
 * The per-model entry of `m` that applies to `model`: the exact name, else the longest `prefix*` that
 * matches. Own properties only, so a model named `constructor` or `__proto__` matches nothing inherited.
 * `also`: the names the request's candidate channels map it to; they match like the requested name (an
 * alias must not be a way around a limit on its target), the requested name's exact entry first.
 */
export function modelLimitFor(m: LimitFields['modelLimits'], model: string | null, also: readonly string[] = []): [string, LimitFields] | null {
  if (!m || model === null) return null;
  if (Object.hasOwn(m, model)) return [model, m[model]!];
  for (const a of also) if (Object.hasOwn(m, a)) return [a, m[a]!];
  let best: string | null = null;
  for (const p of Object.keys(m)) {
    if (!p.endsWith('*') || (best !== null && p.length <= best.length)) continue;
    const prefix = p.slice(0, -1);
    if (model.startsWith(prefix) || also.some((a) => a.startsWith(prefix))) best = p;
  }
  return best === null ? null : [best, m[best]!];
}

/** Who a request counts against. */
export interface LimitSubject {
  key: LimitFields & { id: number };
  user: LimitFields & { id: number };
  group: LimitFields & { name: string };
}

export interface LimiterConfig {
  /** A lease not renewed for this long stops counting (its process died); held leases are renewed at a third of it. */
  leaseMs: number;
}

const MINUTE = 60_000;
type Scope = 'key' | 'user' | 'group';

/**
 * A request's admission: `release` gives its concurrency back (idempotent; call it on every path); `unused`
 * gives back the tokens per minute it counted, for a request refused before any upstream call (idempotent).
 */
export interface Admission {
  release(): void;
  unused(): void;
}

const NONE: Admission = { release() {}, unused() {} };

export class RequestLimiter {
  constructor(private readonly limits: RateLimits, private readonly cfg: LimiterConfig) {}

  /**
   * Whether any scope of `s` has a limit that applies to `model` (most requests: none, and admission
   * is skipped: not even a microtask).
   */
  static limited(s: LimitSubject, model: string | null = null, also: readonly string[] = []): boolean {
    const any = (f: LimitFields) => f.maxConcurrency > 0 || f.rateLimitRpm > 0 || f.rateLimitTpm > 0 || modelLimitFor(f.modelLimits, model, also) !== null;
    return any(s.key) || any(s.user) || any(s.group);
  }

  /**
   * Admits one request of `tokens` (0 for routes that carry no generation) for `model` (null: no
   * model limits apply) or throws 429 with `retry-after` and a code naming the limit
   * (`key_rpm_exceeded`, `user_tpm_exceeded`, `group_model_concurrency_exceeded`, …). `hold: false`
   * skips concurrency (requests that finish at once).
   */
  async admit(s: LimitSubject, opts: { tokens: number; hold: boolean; model?: string | null; mappedTo?: readonly string[] }): Promise<Admission> {
    const scopes: ScopeLimit[] = [];
    const add = (scope: Scope, f: LimitFields, id: string) => {
      scopes.push([scope, f, id, null]);
      const m = modelLimitFor(f.modelLimits, opts.model ?? null, opts.mappedTo);
      if (m) scopes.push([scope, m[1], `${id}:m:${m[0]}`, m[0]]);
    };
    add('key', s.key, `k:${s.key.id}`);
    add('user', s.user, `u:${s.user.id}`);
    add('group', s.group, `g:${s.group.name}`);
    const leases: Lease[] = [];
    // A release that keeps failing past its lease is moot (the lease lapsed); one rejection must not be unhandled.
    const giveBack = () => { for (const l of leases.splice(0)) void this.limits.release(l).catch(() => {}); };
    // Hits counted so far: [counter, cost, window start], to give back (requests, tokens).
    type Counted = Array<[string, number, number]>;
    const [requests, tokens]: [Counted, Counted] = [[], []];
    const unhit = (hits: Counted) => {
      for (const [id, cost, windowStart] of hits.splice(0)) void this.limits.unhit(id, { windowMs: MINUTE, cost, windowStart }).catch(() => { /* counted until the window passes */ });
    };
    const unused = () => unhit(tokens);
    try {
      if (opts.hold) {
        for (const [scope, f, id, pattern] of scopes) {
          if (f.maxConcurrency <= 0) continue;
          const lease = await this.limits.acquire(`lim:cc:${id}`, { max: f.maxConcurrency, leaseMs: this.cfg.leaseMs });
          if (!lease) throw refused(scope, 'concurrency', `at most ${f.maxConcurrency} requests in flight`, 1000, true, pattern);
          leases.push(lease);
        }
      }
      for (const [scope, f, id, pattern] of scopes) {
        if (f.rateLimitRpm <= 0) continue;
        const r = await this.limits.hit(`lim:rpm:${id}`, { limit: f.rateLimitRpm, windowMs: MINUTE });
        if (!r.ok) throw refused(scope, 'rpm', `${f.rateLimitRpm} requests per minute`, r.retryAfterMs, true, pattern);
        requests.push([`lim:rpm:${id}`, 1, r.windowStart]);
      }
      for (const [scope, f, id, pattern] of scopes) {
        if (f.rateLimitTpm <= 0 || opts.tokens <= 0) continue;
        if (opts.tokens > f.rateLimitTpm) throw refused(scope, 'tpm', `${f.rateLimitTpm} tokens per minute; this request may use ${opts.tokens}`, MINUTE, false, pattern);
        const r = await this.limits.hit(`lim:tpm:${id}`, { limit: f.rateLimitTpm, windowMs: MINUTE, cost: opts.tokens });
        if (!r.ok) throw refused(scope, 'tpm', `${f.rateLimitTpm} tokens per minute`, r.retryAfterMs, true, pattern);
        tokens.push([`lim:tpm:${id}`, opts.tokens, r.windowStart]);
      }
    } catch (e) {
      // Refused by a later limit: the earlier ones give back what they counted, so a key's own limit bounds
      // what it takes of its owner's and group's (a refused request spent their requests per minute).
      giveBack();
      unhit(requests);
      unused();
      throw e;
    }
    if (!leases.length) return tokens.length ? { release() {}, unused } : NONE;
    // Long streams outlive a lease: renew while held, so only a dead process's leases expire.
    const timer = setInterval(() => {
      for (const l of leases) void this.limits.renew(l, this.cfg.leaseMs).catch(() => { /* tried again next interval */ });
    }, Math.max(1, Math.floor(this.cfg.leaseMs / 3)));
    (timer as { unref?: () => void }).unref?.();
    let released = false;
    return {
      release() {
        if (released) return;
        released = true;
        clearInterval(timer);
        giveBack();
      },
      unused,
    };
  }
}

/** A scope's limits to check: scope, fields, counter id, and the model pattern for a per-model entry (else null). */
type ScopeLimit = [Scope, LimitFields, string, string | null];

function refused(scope: Scope, kind: 'rpm' | 'tpm' | 'concurrency', what: string, retryAfterMs: number, retryable: boolean, pattern: string | null): GatewayError {
  const models = pattern === null ? '' : ` on models ${pattern}`;
  const message = `Limit of ${what}${models} reached for this ${scope === 'key' ? 'API key' : scope}`;
  const headers: Record<string, string> = retryable ? { 'retry-after': String(Math.max(1, Math.ceil(retryAfterMs / 1000))) } : {};
  if (pattern === null) return new GatewayError(429, `${scope}_${kind}_exceeded`, message, { headers });
  return new GatewayError(429, `${scope}_model_${kind}_exceeded`, message, { headers, param: 'model' });
}
