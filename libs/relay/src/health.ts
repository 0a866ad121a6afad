import { everyWhileLeader, type Leader, type Logger } from '@gw/core';
import type { ChannelFailureRules } from '@gw/db';
import type { KeyRef } from '@gw/channels';

/** A channel as health checks see it. */
export interface HealthChannel {
  id: number;
  status: number;
  failureRules?: ChannelFailureRules;
  /** This channel's probe interval; null/absent = the global one. */
  probeIntervalMs?: number | null;
  /** Its keys (status 3 = auto-disabled, probed like a channel). */
  keys?: Array<KeyRef & { status: number }>;
}

export interface HealthDeps {
  /** Every channel (any status), from the in-memory registry. */
  all(): HealthChannel[];
  get(id: number): HealthChannel | undefined;
  /** ChannelService.setStatus: 1 enabled, 3 auto-disabled. Never called with 2. */
  setStatus(id: number, status: 1 | 3, reason: string): Promise<void>;
  /**
   * One cheap upstream request (with that key, else a usable one); resolves true when it succeeded, false also
   * when the channel no longer holds that key (the operator replaced it).
   */
  probe(id: number, key?: KeyRef, signal?: AbortSignal): Promise<boolean>;
  /** Re-enables an auto-disabled key, if the channel still holds it (ChannelKeyService.reEnable). */
  reEnableKey?(id: number, key: KeyRef): Promise<void>;
  log?: Logger;
}

const AUTO_DISABLED = 3;
/**
 * A key whose probe succeeded after a refusal is trusted this long: a refusal with it meanwhile is taken as the
 * request's, without another probe (a hostile client repeating its request costs one probe per key per period).
 */
const KEY_PROOF_MS = 10_000;
const ENABLED = 1;

/** The last `size` outcomes of a channel (1 = failure) with their times: a fixed ring, O(size) per check. */
class OutcomeRing {
  readonly failed: Uint8Array;
  readonly at: Float64Array;
  private pos = 0;

  constructor(readonly size: number) {
    this.failed = new Uint8Array(size);
    this.at = new Float64Array(size);
  }

  push(failed: boolean, now: number): void {
    this.failed[this.pos] = failed ? 1 : 0;
    this.at[this.pos] = now;
    this.pos = (this.pos + 1) % this.size;
  }

  /** Failures recorded at or after `since` (ms). */
  failures(since: number): number {
    let n = 0;
    for (let i = 0; i < this.size; i++) if (this.failed[i] && this.at[i]! >= since) n++;
    return n;
  }
}

/**
 * Channel health: the last outcomes of each channel in a ring (created at its first failure, dropped once
 * it holds no failure). A channel is auto-disabled (status 3) when `failures` of its last `window_requests`
 * outcomes (younger than `window_seconds`, when set) failed; the defaults (N = RELAY_HEALTH_FAILURES out
 * of the last N) mean N consecutive failures. A background prober (on the leader only, see follow) tries
 * each auto-disabled channel and key on its own interval and re-enables what answers. Status 2 (an
 * operator's decision) is never touched: the prober only acts on status 3 and checks again before acting.
 */
export class ChannelHealth {
  private readonly rings = new Map<number, OutcomeRing>();
  private readonly lastProbe = new Map<string, number>();
  private probing = false;
  /** Channels whose disable is being confirmed by a probe (one probe at a time per channel). */
  private readonly confirming = new Set<number>();
  /** Key refusals being confirmed (see slot() → the probe's verdict), shared by concurrent refusals. */
  private readonly keyProbes = new Map<string, Promise<boolean>>();
  /** When a key last passed a refusal's probe. */
  private readonly keyProofs = new Map<string, number>();

  /**
   * A key's entry in the maps above and lastProbe: by its fingerprint too, so that a new key the operator put
   * under the same id shares neither the old one's probe, nor its proof, nor its probe schedule.
   */
  private static slot(id: number, key: KeyRef): string {
    return `${id}:${key.id}:${key.fingerprint}`;
  }

  /** Aborted by close(): cuts the confirm probes, after which nothing is written. */
  private readonly stopping = new AbortController();
  /** Confirmations running: started by requests without waiting (a request's failure is not its client's wait). */
  private readonly pending = new Set<Promise<unknown>>();

  constructor(private readonly deps: HealthDeps, private readonly opts: { threshold: number; probeIntervalMs: number; confirm?: boolean; now?: () => number }) {}

  /**
   * Cuts the confirmation probes still running and resolves once they ended. They are started by requests and not
   * waited for, so they outlived a shutdown's drain: one answered after the database closed wrote into it.
   */
  async close(): Promise<void> {
    this.stopping.abort();
    await Promise.allSettled([...this.pending]);
  }

  private track<T>(p: Promise<T>): Promise<T> {
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p)).catch(() => {});
    return p;
  }

  private now(): number {
    return this.opts.now?.() ?? Date.now();
  }

  success(id: number): void {
    const ring = this.rings.get(id);
    if (!ring) return;
    ring.push(false, this.now());
    if (!ring.failures(0)) this.rings.delete(id);
  }

  /**
   * Records a failure. When the channel's rule is met, the failing requests alone do not disable it (unless
   * `confirm` is off): one neutral probe request decides. A client can make an upstream fail on purpose (an
   * input that crashes it), and failover spreads one such request over every channel of a model; only a
   * channel that also fails the probe goes down. Resolves true when it disabled the channel.
   */
  failure(id: number, reason: string): Promise<boolean> {
    return this.track(this.countFailure(id, reason));
  }

  private async countFailure(id: number, reason: string): Promise<boolean> {
    const c = this.deps.get(id);
    // A request that ends after its channel was disabled (or deleted) says nothing about the channel to come back.
    if (!c || c.status !== ENABLED) {
      this.rings.delete(id);
      return false;
    }
    const r = c.failureRules ?? {};
    const need = r.failures ?? this.opts.threshold;
    const size = Math.max(need, r.window_requests ?? need);
    let ring = this.rings.get(id);
    if (!ring || ring.size !== size) this.rings.set(id, (ring = new OutcomeRing(size)));
    const now = this.now();
    ring.push(true, now);
    const n = ring.failures(r.window_seconds ? now - r.window_seconds * 1000 : 0);
    if (n < need || this.confirming.has(id)) return false;
    this.rings.delete(id);
    const rule = size === need && !r.window_seconds ? `${n} consecutive failures` : `${n} failures within ${size} requests${r.window_seconds ? ` and ${r.window_seconds} s` : ''}`;
    if (this.opts.confirm !== false) {
      this.confirming.add(id);
      try {
        if (await this.deps.probe(id, undefined, this.stopping.signal).catch(() => false)) {
          this.deps.log?.info('channel.kept', { channel: id, reason, msg: `${rule}, but the probe succeeded` });
          return false;
        }
      } finally {
        this.confirming.delete(id);
      }
    }
    // An operator may have changed the status while the probe ran: only an enabled channel is disabled. After close()
    // (a probe it cut proved nothing; a request still ending at shutdown reports its failure with no probe when
    // `confirm` is off) the database may be closing: nothing is written.
    if (this.stopping.signal.aborted || this.deps.get(id)?.status !== ENABLED) return false;
    await this.deps.setStatus(id, AUTO_DISABLED, `auto-disabled after ${rule}${this.opts.confirm !== false ? ' and a failed probe' : ''}: ${reason}`.slice(0, 500));
    this.deps.log?.warn('channel.auto_disabled', { channel: id, reason });
    return true;
  }

  /**
   * The upstream refused a request sent with this key (401/402/403, a quota 429). A client can get such an
   * answer with its own content (a content filter, a feature or beta the account may not use), and without a
   * check one such request set aside every key of the channel, then of every channel it failed over to. One
   * neutral probe with the same key decides (unless `confirm` is off): true = the key is refused, false = it
   * works and the refusal was about the request. Concurrent refusals of a key share one probe. `key` is the
   * key the request was sent with: a key the channel no longer holds is not probed (true; its disable is a no-op).
   * On true, `setAside` (the key's disable write) has already been started here and is awaited by close(): the
   * "not stopped" check and the write are one synchronous step, so a close() can land before both or after both.
   * Before, the caller wrote once the verdict reached it, a microtask or more after the check: a close() in between
   * resolved at once and the write went into a closing database.
   */
  async keyRefused(id: number, key: KeyRef, setAside: () => Promise<void> = async () => {}): Promise<boolean> {
    if (!(await this.judgeRefusal(id, key)) || this.stopping.signal.aborted) return false;
    this.track(setAside()).catch(() => {});
    return true;
  }

  private async judgeRefusal(id: number, key: KeyRef): Promise<boolean> {
    // A refusal that arrives after the channel left service (an operator's disable while the request was in flight)
    // judges nothing: no probe is sent with its key, and the request moves on to another channel, not to this one's
    // other keys (before, it probed the disabled channel and then sent the request with each of its keys in turn).
    if (this.deps.get(id)?.status !== ENABLED) return false;
    // Not after close() (checked by the caller): setting the key aside writes into a database that may be closing.
    if (this.opts.confirm === false) return true;
    const k = ChannelHealth.slot(id, key);
    const proven = this.keyProofs.get(k);
    if (proven !== undefined) {
      if (this.now() - proven < KEY_PROOF_MS) return false;
      this.keyProofs.delete(k);
    }
    let verdict = this.keyProbes.get(k);
    if (!verdict) {
      const ref = { id: key.id, fingerprint: key.fingerprint };
      verdict = this.track(this.deps.probe(id, ref, this.stopping.signal).catch(() => false).then((ok) => {
        this.keyProbes.delete(k);
        if (ok) this.prove(k);
        // Cut by close(): not a refusal (checked again by the caller, right before its write).
        return !ok && !this.stopping.signal.aborted;
      }));
      this.keyProbes.set(k, verdict);
    }
    return verdict;
  }

  /** Records a key's proof, dropping expired ones (a replaced key's proof is never looked up again). */
  private prove(k: string): void {
    const now = this.now();
    for (const [slot, at] of this.keyProofs) if (now - at >= KEY_PROOF_MS) this.keyProofs.delete(slot);
    this.keyProofs.set(k, now);
  }

  /**
   * The channel changed (an operator's disable, enable or edit, a key change; null = every channel): its count
   * starts again. Before, failures from before an operator's disable were still counted after the re-enable, so
   * one failure then completed a streak (with RELAY_HEALTH_CONFIRM=false, disabled the channel at once). Any
   * change rather than status changes only: across nodes the change feed may deliver a disable and re-enable as
   * two reads of the re-enabled row.
   */
  forget(id: number | null): void {
    if (id === null) this.rings.clear();
    else this.rings.delete(id);
  }

  /** Failures among the outcomes the channel's window still holds. */
  recentFailures(id: number): number {
    return this.rings.get(id)?.failures(0) ?? 0;
  }

  /**
   * Probes while `leader` leads (one node of a cluster); the stop function resolves once a running round ended (its
   * probes are aborted, and none writes a status after the stop) or LEADER_STOP_GRACE_MS passed.
   */
  follow(leader: Leader): () => Promise<void> {
    // Ticks at least every second (the shortest per-channel interval allowed); each tick probes only what is due.
    return everyWhileLeader(leader, Math.min(this.opts.probeIntervalMs, 1000), (signal) => this.probeOnce(false, signal));
  }

  /**
   * Probes every auto-disabled channel and auto-disabled key once (one round at a time); with `all`
   * false only those whose interval has passed since their last probe. Returns the channel ids re-enabled. Once
   * `signal` is aborted (leadership lost, or a shutdown closing the database) the probes are cut and write nothing.
   */
  async probeOnce(all = true, signal?: AbortSignal): Promise<number[]> {
    if (this.probing) return [];
    this.probing = true;
    try {
      const now = this.now();
      // First seen down: probed one interval later (not at once), then every interval.
      const due = (k: string, c: HealthChannel) => {
        const last = this.lastProbe.get(k);
        if (!all && (last === undefined || now - last < (c.probeIntervalMs ?? this.opts.probeIntervalMs))) {
          if (last === undefined) this.lastProbe.set(k, now);
          return false;
        }
        this.lastProbe.set(k, now);
        return true;
      };
      const jobs: Array<Promise<void>> = [];
      const healed: number[] = [];
      for (const c of this.deps.all()) {
        if (c.status === 2) continue;
        for (const k of c.keys ?? []) {
          const slot = ChannelHealth.slot(c.id, k);
          if (k.status !== AUTO_DISABLED || !due(slot, c)) continue;
          // Bound to the key probed: if the operator replaces it meanwhile, its success re-enables nothing else.
          const ref = { id: k.id, fingerprint: k.fingerprint };
          jobs.push(this.deps.probe(c.id, ref, signal).catch(() => false).then(async (ok) => {
            if (!ok || signal?.aborted) return;
            this.lastProbe.delete(slot);
            await this.deps.reEnableKey?.(c.id, ref);
            this.deps.log?.info('channel.key_re_enabled', { channel: c.id, key: k.id, by: 'health probe' });
          }));
        }
        // A channel down only for want of keys comes back through its keys (above), not a channel probe.
        if (c.status !== AUTO_DISABLED || !(c.keys ?? [{ status: ENABLED }]).some((k) => k.status === ENABLED) || !due(`${c.id}`, c)) continue;
        jobs.push(this.deps.probe(c.id, undefined, signal).catch(() => false).then(async (ok) => {
          if (!ok || signal?.aborted || this.deps.get(c.id)?.status !== AUTO_DISABLED) return;
          await this.deps.setStatus(c.id, ENABLED, '');
          this.rings.delete(c.id);
          this.lastProbe.delete(`${c.id}`);
          this.deps.log?.info('channel.re_enabled', { channel: c.id, by: 'health probe' });
          healed.push(c.id);
        }));
      }
      this.dropGoneKeys();
      await Promise.all(jobs);
      return healed;
    } finally {
      this.probing = false;
    }
  }

  /** A removed or replaced key's probe schedule is never due again (its slot names the old value): dropped. */
  private dropGoneKeys(): void {
    for (const slot of this.lastProbe.keys()) {
      const [id, keyId, fingerprint] = slot.split(':');
      if (fingerprint === undefined) continue;
      const listed = this.deps.get(Number(id))?.keys?.some((k) => k.id === Number(keyId) && k.fingerprint === fingerprint);
      if (!listed) this.lastProbe.delete(slot);
    }
  }
}
