/**
 * Request limits per key, per user and per group, on the RateLimits port (in-process today, Redis when
 * several nodes share the limits): requests per minute and tokens per minute with `hit`, requests in
 * flight with `acquire`/`release` leases. 0 = unlimited for every field.
 *
 * Order: concurrency first (a refused request gives back the leases it took), then requests per
 * minute, then tokens per minute, each key → user → group. A hit counts once it passes and the port
 * has no refund, so a request refused by a later window has still used a unit of the earlier ones.
 *
 * Tokens per minute count what admission reserves (the input bound plus max_tokens), not what the
 * upstream later reports: the limit can then never be exceeded by requests already admitted, at the
 * price of counting unused output. Nothing is refunded at settlement.
 */
import { GatewayError, type Lease, type RateLimits } from '@gw/core';

/** The limit fields of a key, a user or a group. */
export interface LimitFields {
  rateLimitRpm: number;
  rateLimitTpm: number;
  maxConcurrency: number;
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

/** A request's admission: `release` gives its concurrency back (idempotent; call it on every path). */
export interface Admission {
  release(): void;
}

const NONE: Admission = { release() {} };

export class RequestLimiter {
  constructor(private readonly limits: RateLimits, private readonly cfg: LimiterConfig) {}

  /**
   * Admits one request of `tokens` (0 for routes that carry no generation) or throws 429 with
   * `retry-after` and a code naming the limit (`key_rpm_exceeded`, `user_tpm_exceeded`,
   * `group_concurrency_exceeded`, …). `hold: false` skips concurrency (requests that finish at once).
   */
  /** Whether any scope of `s` has a limit at all (most requests: none, and admission is skipped). */
  static limited(s: LimitSubject): boolean {
    const any = (f: LimitFields) => f.maxConcurrency > 0 || f.rateLimitRpm > 0 || f.rateLimitTpm > 0;
    return any(s.key) || any(s.user) || any(s.group);
  }

  async admit(s: LimitSubject, opts: { tokens: number; hold: boolean }): Promise<Admission> {
    const scopes: Array<[Scope, LimitFields, string]> = [['key', s.key, `k:${s.key.id}`], ['user', s.user, `u:${s.user.id}`], ['group', s.group, `g:${s.group.name}`]];
    const leases: Lease[] = [];
    const giveBack = () => { for (const l of leases.splice(0)) void this.limits.release(l); };
    try {
      if (opts.hold) {
        for (const [scope, f, id] of scopes) {
          if (f.maxConcurrency <= 0) continue;
          const lease = await this.limits.acquire(`lim:cc:${id}`, { max: f.maxConcurrency, leaseMs: this.cfg.leaseMs });
          if (!lease) throw refused(scope, 'concurrency', `at most ${f.maxConcurrency} requests in flight`, 1000);
          leases.push(lease);
        }
      }
      for (const [scope, f, id] of scopes) {
        if (f.rateLimitRpm <= 0) continue;
        const r = await this.limits.hit(`lim:rpm:${id}`, { limit: f.rateLimitRpm, windowMs: MINUTE });
        if (!r.ok) throw refused(scope, 'rpm', `${f.rateLimitRpm} requests per minute`, r.retryAfterMs);
      }
      for (const [scope, f, id] of scopes) {
        if (f.rateLimitTpm <= 0 || opts.tokens <= 0) continue;
        if (opts.tokens > f.rateLimitTpm) throw refused(scope, 'tpm', `${f.rateLimitTpm} tokens per minute; this request may use ${opts.tokens}`, MINUTE, false);
        const r = await this.limits.hit(`lim:tpm:${id}`, { limit: f.rateLimitTpm, windowMs: MINUTE, cost: opts.tokens });
        if (!r.ok) throw refused(scope, 'tpm', `${f.rateLimitTpm} tokens per minute`, r.retryAfterMs);
      }
    } catch (e) {
      giveBack();
      throw e;
    }
    if (!leases.length) return NONE;
    // Long streams outlive a lease: renew while held, so only a dead process's leases expire.
    const timer = setInterval(() => { for (const l of leases) void this.limits.renew(l, this.cfg.leaseMs); }, Math.max(1, Math.floor(this.cfg.leaseMs / 3)));
    (timer as { unref?: () => void }).unref?.();
    let released = false;
    return {
      release() {
        if (released) return;
        released = true;
        clearInterval(timer);
        giveBack();
      },
    };
  }
}

function refused(scope: Scope, kind: 'rpm' | 'tpm' | 'concurrency', what: string, retryAfterMs: number, retryable = true): GatewayError {
  const message = `Limit of ${what} reached for this ${scope === 'key' ? 'API key' : scope}`;
  const headers: Record<string, string> = retryable ? { 'retry-after': String(Math.max(1, Math.ceil(retryAfterMs / 1000))) } : {};
  return new GatewayError(429, `${scope}_${kind}_exceeded`, message, { headers });
}
