import { ANSWER_MAX_DEPTH, ANSWER_MAX_VALUES, GatewayError, errorText, jsonShapeWithin, readBounded, readResponseBounded, stdLogger, type Logger } from '@gw/core';
import { contextWindowOf, usageLimits, worstCaseCost, type BillingConfig, type PriceBook, type QuotaService, type Reservation, type TokenUsage, type UsageLimits, type UsageReport } from '@gw/billing';
import { countsNothing, estimateTextTokens, noCount, measureRequestTokens, type MessagesRequest, type Usage } from '@gw/formats';
import type { PriceRow } from '@gw/db';
import { applyBodyPolicy, applyHeaderPolicy, type ChannelRecord, type KeyRef } from '@gw/channels';
import { badUpstreamResponse, countCodeExecutionCalls, decodeContextFor, errorBodyOf, scrubberFor, StreamStartJudge, upstreamMessage, type ProviderAdapter, type ReportedPeak, type Scrubber, type UpstreamRequest, type UpstreamTarget } from '@gw/providers';
import type { RelayConfig } from './config';
import type { GateKey } from './gate';
import { abortError, judgeFailure, type FailureInput } from './fault';
import type { ChannelHealth } from './health';
import { conversationOf, type SessionAffinity } from './affinity';
import { orderCandidates } from './router';
import { relayStream, type StreamEnd } from './stream-relay';
import { readStreamStart, type StreamStart } from './stream-start-read';
import { isKeyRefusal, KeyPicker } from './keys';
import { countsAsFailure } from './failure-rules';
import { defaultPolicy, type GroupPolicy } from './group-policy';
import { RequestLimiter, type LimitFields } from './limits';
import { basePlan, coverAll, planFor, type ChannelPlan, type PlanDeps } from './channel-plan';
import { turnOver } from './turn';
import { heldTail } from './held-tail';
import { capWebSearch, webSearchBound } from './web-search';
import { refuseUnmeteredIterations } from './iterations';
import { clientNotFound } from './client-not-found';
import { codeExecutionToolAt, requireCodeExecutionPrice } from './code-execution';
import { samplingsBound } from './server-tool-loop';
import { namesStreamOptions, StreamOptionsRefusals } from './stream-options';
import { DecodedBound, identityEncoding, isCompressed } from './stream-encoding';
import { cacheWritesOf } from './cache-writes';

const utf8 = new TextEncoder();

/** The fields of a channel the relay reads (one source of truth: @gw/channels' ChannelRecord). */
export type RelayChannel = Pick<ChannelRecord, 'id' | 'type' | 'baseUrl' | 'apiKey' | 'models' | 'modelMapping' | 'groups'
  | 'priority' | 'weight' | 'status' | 'timeoutMs' | 'headers' | 'headerPolicy' | 'keys' | 'keySelection' | 'failureRules' | 'firstByteTimeoutMs' | 'probeIntervalMs'
  | 'overrides' | 'billingModel' | 'reasoningEcho'>;
type RelayKey = RelayChannel['keys'][number];

/** What the relay tells the owner of channel keys (ChannelKeyService and its counters). */
export interface RelayKeyEvents {
  /**
   * The upstream refused this key (auth, payment, quota): set it aside. Resolves with the usable keys left. By
   * KeyRef, not id: the operator may have put another key under that id since the request picked this one.
   */
  refused(channelId: number, key: KeyRef, reason: string): Promise<number>;
  /** One upstream request made with this key; `ok` false when it failed for the upstream's reasons. */
  used(channelId: number, key: KeyRef, ok: boolean): void;
}

export interface RelayDeps {
  channels: { candidates(model: string, group: string): RelayChannel[]; all(): RelayChannel[]; serves(model: string, group: string): boolean };
  adapter(type: string): ProviderAdapter;
  prices: PriceBook;
  quota: QuotaService;
  health: ChannelHealth;
  billing: BillingConfig;
  config: RelayConfig;
  /** Keeps a conversation on the channel that served it (prompt-cache hits); absent = no affinity. */
  affinity?: SessionAffinity;
  rng?: () => number;
  /** Sees every upstream attempt's outcome (metrics); 'rate_limited' is a 429, which health ignores. */
  observeAttempt?: (channelId: number, result: 'ok' | 'error' | 'rate_limited') => void;
  /** Per-key outcomes; absent = a refused key counts against the channel like any upstream fault. */
  keys?: RelayKeyEvents;
  log?: Logger;
  /** Group ratios and fallbacks; absent = every group ×1 with no fallbacks. */
  groups?: { policy(name: string): GroupPolicy };
  /** Per key/user/group limits; absent = none. */
  limiter?: RequestLimiter;
}

/** One authorized /v1/messages request. */
export interface RelayRequest {
  requestId: string;
  body: MessagesRequest;
  headers: Headers;
  key: GateKey;
  /** The key's owner, for the per-user limits; absent = no user limits. */
  user?: LimitFields & { id: number };
  group: string;
  ip: string;
  /** performance.now() when the request arrived. */
  startedAt: number;
  /** Aborted when the client goes away or its credential is revoked (a GatewayError reason is told to the client). */
  signal?: AbortSignal;
  /** Called once the request is settled (its end, on every path that reached the quota stage). */
  onSettled?: () => void;
}

/**
 * What settling a request needs and nothing more. A stream holds it (through its end callback) for its
 * whole life, so it must not reach the request's body or headers: a long conversation's body is often
 * hundreds of kB, which every held stream kept alive until its end.
 */
interface Ticket {
  requestId: string;
  key: GateKey;
  model: string;
  stream: boolean;
  startedAt: number;
  ip: string;
  group: string;
  /** The requesting group's ratio is what it pays, whichever group's channel serves it. */
  ratio: number;
  onSettled: () => void;
}

/**
 * What a settlement takes from the serving channel's plan (not its body). `price` is the one the request was admitted
 * and held at: a price an administrator changes or deletes while the request runs does not reprice it (deleted, it
 * billed the request at 0; raised, above its hold).
 */
interface PlanBill { billedModel: string; price: PriceRow | null; limits: UsageLimits; overrides: string }

/**
 * What an unusable cache count (1500.5, -5, "7", an unsafe integer) is billed at on a native channel: Anthropic's
 * cache reads and writes come on top of `input_tokens`, so billing one as none (the guard's default for optional
 * counts) would serve the cached prompt free, though the client was shown a count and the upstream bills one. It is
 * billed like an unusable input count, at the reserved input bound (then clamped with the rest of the input).
 * Translated answers keep the default: OpenAI's cached counts are part of prompt_tokens, already billed as input.
 */
function cacheFallback(ch: RelayChannel, bill: PlanBill, peak?: ReportedPeak): Partial<TokenUsage> {
  if (ch.type !== 'anthropic') return {};
  return { cacheRead: atLeast(bill.limits.input, peak?.cache_read_input_tokens), cacheWrite: atLeast(bill.limits.input, peak?.cache_creation_input_tokens) };
}
/**
 * A native stream's counts are cumulative: a count made unusable by a later event is billed at its fallback, but never
 * below the highest usable count an earlier event showed the client (a message_start's 900 input tokens, then a
 * message_delta's `-1`, billed the reserved bound of a short prompt).
 */
const atLeast = (fallback: number, peak: number | undefined) => Math.max(fallback, estimateSafe(peak) ?? 0);
/**
 * The uncached part of the whole-prompt estimate an input count left out is billed on: cache reads and writes the
 * upstream did count are a part of that prompt (README: Metering invariants). Billed whole, they were paid twice,
 * at the input price inside the estimate and again at their own.
 */
const uncachedOf = (whole: number, u: Usage | null | undefined): number =>
  Math.max(0, whole - (estimateSafe(u?.cache_read_input_tokens) ?? 0) - (estimateSafe(cacheWritesOf(u)) ?? 0));
const billOf = (plan: ChannelPlan): PlanBill => ({ billedModel: plan.billedModel, price: plan.price ?? null, limits: plan.sized.limits, overrides: plan.changed.length ? JSON.stringify(plan.changed) : '' });

/** A request past admission. */
type Admitted = RelayRequest & { ticket: Ticket };

// Built outside the request's function scope on purpose: a closure keeps its whole enclosing scope alive
// (here the request, its body and plans) for as long as the closure lives, which for a stream is its life.
const settledBy = (admission: { release(): void } | null, next: (() => void) | undefined) => () => { admission?.release(); next?.(); };

/**
 * A channel's scrubber, built on first use (failures only): it knows every key of the channel, not just this one,
 * and its header secrets, also those this model's overrides removed or replaced.
 */
function lazyScrubber(target: UpstreamTarget, ch: RelayChannel): () => Scrubber {
  let memo: Scrubber | null = null;
  return () => (memo ??= scrubberFor({ ...target, channelHeaders: ch.headers, keys: ch.keys.map((k) => k.apiKey) }));
}

const NO_LIMITS: LimitFields = { rateLimitRpm: 0, rateLimitTpm: 0, maxConcurrency: 0 };

type Attempt =
  | { ok: true; response: Response; channel: RelayChannel }
  | { ok: false; retryable: boolean; error: GatewayError; keyRefused?: boolean };

// As reported: QuotaService validates every count (one place for all paths). The 1-hour part of the
// cache writes comes from Anthropic's `cache_creation` split; without it every write is a 5-minute one. A split
// without a total (absent or 0) is the writes (cacheWritesOf).
// Web searches: Anthropic's usage.server_tool_use.web_search_requests (null or absent: none). Code-execution
// calls: counted by the gateway in the answer (the usage has no count for them).
const toTokens = (u: Usage, codeExecution?: number): UsageReport => ({
  input: u.input_tokens, output: u.output_tokens, cacheRead: u.cache_read_input_tokens, cacheWrite: cacheWritesOf(u),
  cacheWrite1h: (u as { cache_creation?: { ephemeral_1h_input_tokens?: unknown } }).cache_creation?.ephemeral_1h_input_tokens,
  webSearch: serverToolUse(u)?.web_search_requests,
  codeExecution,
});
const serverToolUse = (u: Usage): { web_search_requests?: unknown } | null => {
  const s = (u as { server_tool_use?: unknown }).server_tool_use;
  return s && typeof s === 'object' ? s as { web_search_requests?: unknown } : null;
};
const estimateSafe = (n: unknown) => (typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 ? n : undefined);
const ZERO: TokenUsage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 };
const since = (t: number) => Math.max(0, Math.round(performance.now() - t));

/**
 * Errors whose usage row is already written: the request ended that way. A revocation that lands while the row
 * commits (PostgreSQL's group commit) came too late to stop anything, so the answer must stay the row's.
 */
const loggedErrors = new WeakSet<GatewayError>();
export const isLoggedError = (e: unknown): boolean => e instanceof GatewayError && loggedErrors.has(e);

/**
 * POST /v1/messages after the gate: price and quota (402), routing (404/503), attempts with failover,
 * and settlement. Retries happen only before the first byte reached the client, never on a channel that
 * already failed in this request, at most `maxAttempts` channels.
 */
export class RelayService {
  private readonly picker: KeyPicker;
  private readonly streamOptions = new StreamOptionsRefusals();

  constructor(private readonly d: RelayDeps) {
    this.picker = new KeyPicker(d.rng);
  }

  /** The price of `model`, or the reason it cannot be served (404 unknown model, 403 not priced). */
  priceFor(model: string, group: string): PriceRow | undefined {
    const p = this.d.prices.get(model);
    if (p || !this.d.billing.requirePrice) return p;
    if (!this.servedIn(model, this.routeGroups(group))) throw unknownModel(model);
    throw new GatewayError(403, 'model_not_priced', `Model ${model} has no price configured; an administrator must set one before it can be used`, { param: 'model' });
  }

  /**
   * What a request may use (input bound, or the whole context window when some input cannot be
   * measured; max_tokens of output; the web searches its tools' max_uses allow) and its worst-case cost
   * at the dearest prices.
   */
  worstCase(body: MessagesRequest, price: PriceRow | undefined, input: { bound: number; unmeasured: boolean }, ratio?: number, headers?: Headers, upstreamBeta?: string): { amount: number; limits: UsageLimits } {
    const window = Math.max(contextWindowOf(price, this.d.billing.defaultContextTokens), betaContextTokens(headers?.get('anthropic-beta')), betaContextTokens(upstreamBeta));
    const limits: UsageLimits = usageLimits({ tokens: input.bound, unmeasured: input.unmeasured }, body.max_tokens, window);
    const searches = webSearchBound(body, this.d.billing.webSearchMaxUses);
    if (searches > 0) limits.maxWebSearch = searches;
    // Code execution has no max_uses: a request with the tool is reserved for (and billed at most) the configured calls.
    if (codeExecutionToolAt(body) >= 0) limits.maxCodeExecution = this.d.billing.codeExecutionMaxCalls;
    // Reported input may reach one window per sampling of a server-tool loop (server-tool-loop.ts); the hold stays one window.
    limits.maxInput = window * samplingsBound(body, this.d.billing.webSearchMaxUses, this.d.billing.codeExecutionMaxCalls);
    limits.samplingInput = window;
    return { amount: Math.max(this.d.billing.minReserve, worstCaseCost(limits, price, ratio, this.d.prices.webSearchPrice(price))), limits };
  }

  /** The group's policy (ratio, fallbacks, limits). */
  policy(group: string): GroupPolicy {
    return this.d.groups?.policy(group) ?? defaultPolicy(group);
  }

  /** The group, then its fallbacks in order (only its own list: fallbacks of fallbacks are not followed). */
  routeGroups(group: string): string[] {
    const { fallbacks } = this.policy(group);
    return fallbacks.length ? [...new Set([group, ...fallbacks])] : [group];
  }

  private servedIn(model: string, groups: string[]): boolean {
    return groups.some((g) => this.d.channels.serves(model, g));
  }

  /** Channels to try, best first (a pinned conversation's channel first within its tier); throws 404 (nobody serves it) or 503 (all unhealthy). */
  route(model: string, group: string, pinKey: string | null = null): RelayChannel[] {
    // The group's channels first, then each fallback group's, in order: a fallback serves only what the
    // groups before it could not (none healthy, or all failed in this request).
    const groups = this.routeGroups(group);
    let order: RelayChannel[];
    // One group (no fallbacks, the common case): its candidates are distinct channels already, so no Set and no copy.
    if (groups.length === 1) order = orderCandidates(this.d.channels.candidates(model, group), this.d.rng);
    else {
      const seen = new Set<number>();
      order = [];
      for (const g of groups) {
        for (const c of orderCandidates(this.d.channels.candidates(model, g), this.d.rng)) {
          if (!seen.has(c.id)) { seen.add(c.id); order.push(c); }
        }
      }
    }
    if (order.length) {
      const pinned = this.d.affinity?.apply(order, pinKey) ?? order;
      return pinned.length > this.d.config.maxAttempts ? pinned.slice(0, this.d.config.maxAttempts) : pinned;
    }
    if (this.servedIn(model, groups)) {
      throw new GatewayError(503, 'no_healthy_channel', `No healthy channel is available for model ${model}; try again later`);
    }
    throw unknownModel(model);
  }

  async messages(req: RelayRequest): Promise<Response> {
    // Web searches are billed per search: every web-search tool's max_uses is capped before anything is
    // sized or sent, so the reservation covers the most the request can be billed.
    refuseUnmeteredIterations(req.body);
    const searchCap = this.d.billing.webSearchMaxUses;
    const body = capWebSearch(req.body, searchCap);
    const policy = this.policy(req.group);
    const pinKey = this.d.affinity?.key({ userId: req.key.userId, group: req.group, model: body.model }, conversationOf(req.headers, body)) ?? null;
    // Routed before sizing, because each channel's overrides and billing model change what the request may
    // cost; a routing error is kept and thrown after the quota check, so the check order stays the same.
    let order: RelayChannel[] = [];
    let routeError: unknown = null;
    try {
      order = this.route(body.model, req.group, pinKey);
    } catch (e) {
      routeError = e;
    }
    const planDeps: PlanDeps = {
      price: (m) => this.d.prices.get(m),
      worstCase: (b, price, input, upstreamBeta) => this.worstCase(b, price, input, policy.ratio, req.headers, upstreamBeta),
      // A channel override that adds or changes a web-search tool is capped like the client's.
      capTools: (b) => capWebSearch(b, searchCap),
    };
    const base = basePlan(body, measureRequestTokens(body), planDeps);
    const plans = order.map((ch) => planFor(ch, base, req.headers, planDeps));
    // Sized before priceFor's checks so limits (429) answer before an unknown or unpriced model (404/403).
    const { sized, tokens } = coverAll(plans, base);
    const subject = { key: req.key, user: req.user ?? { ...NO_LIMITS, id: req.key.userId }, group: policy };
    // No limit anywhere (the common case): no admission round, not even a microtask.
    // The names the candidate channels map the model to count like it: an alias is no way around a limit on its target.
    const mappedTo = mappedNames(order, body.model);
    const admission = this.d.limiter && RequestLimiter.limited(subject, body.model, mappedTo)
      ? await this.d.limiter.admit(subject, { tokens, hold: true, model: body.model, mappedTo })
      : null;
    // Limits are given back once the request is settled, on every path (abort included), or now if the quota refuses it.
    const ticket: Ticket = {
      requestId: req.requestId, key: req.key, model: body.model, stream: body.stream === true, startedAt: req.startedAt, ip: req.ip,
      group: req.group, ratio: policy.ratio, onSettled: settledBy(admission, req.onSettled),
    };
    const r: Admitted = { ...req, ticket };
    let reservation: Reservation;
    try {
      this.priceFor(body.model, req.group);
      // Code execution is billed per call at the price's code_execution: without one (for the model, or the
      // upstream model a channel bills) the tool would run on the operator's money, so it is refused here.
      for (const p of plans.length ? plans : [base]) requireCodeExecutionPrice(p.body, p.price, p.billedModel);
      // Synchronous in this process (SQLite: no microtask on the hot path); a promise with shared holds (PostgreSQL).
      const held = this.d.quota.reserve({ userId: r.key.userId, apiKey: r.key, ref: r.requestId, ...sized });
      reservation = held instanceof Promise ? await held : held;
    } catch (e) {
      // Refused before any upstream call: its tokens were never used, so they do not count toward tokens per minute.
      admission?.unused();
      admission?.release();
      throw e;
    }
    let attempts = 0;
    let lastChannel: RelayChannel | null = null;
    let lastPlan: ChannelPlan | null = null;
    try {
      if (routeError) throw routeError;
      let last: GatewayError | null = null;
      for (const [i, channel] of order.entries()) {
        attempts++;
        lastChannel = channel;
        lastPlan = plans[i]!;
        const a = await this.attempt(channel, r, lastPlan, reservation, attempts);
        if (a.ok) {
          this.d.affinity?.pin(pinKey, channel.id);
          return a.response;
        }
        this.d.affinity?.unpin(pinKey, channel.id);
        last = a.error;
        // Stopped while the attempt was being judged (a key-refusal probe takes a round trip): the stop is how the
        // request ended (api_key_revoked, client_closed), in the usage row as in the answer, not the upstream's refusal.
        if (r.signal?.aborted) last = abortError(r.signal);
        if (!a.retryable || r.signal?.aborted) break;
      }
      throw last ?? new GatewayError(503, 'no_healthy_channel', 'No channel could serve the request');
    } catch (e) {
      const err = e instanceof GatewayError ? e : new GatewayError(502, 'upstream_error', 'Upstream request failed', { cause: e });
      // No channel to try (unknown model, none healthy): nothing was sent, so no tokens were used either.
      if (attempts === 0) admission?.unused();
      // Nothing reached the client: no charge, but the attempt is logged.
      const logged = this.settle(reservation, ticket, lastChannel, lastPlan && billOf(lastPlan), ZERO, { status: err.status, errorCode: err.code, attempts, ttftMs: null });
      loggedErrors.add(err);
      if (logged) await logged;
      throw err;
    }
  }

  /**
   * Records the settlement: with SQLite in the journal (durable once this returns; the database write
   * is batched off the request path) and nothing is returned; with a durable sink (PostgreSQL) the
   * promise of its commit, which the caller awaits before the response or stream ends. A failure is
   * logged and charges nothing, never thrown at the client (the request was served).
   */
  private settle(res: Reservation, r: Ticket, ch: RelayChannel | null, plan: PlanBill | null, usage: UsageReport | null, o: SettleOutcome): void | Promise<void> {
    let out: number | Promise<unknown>;
    try {
      out = this.d.quota.finish(res, usageLog(r, ch, plan, usage, o));
    } catch (e) {
      this.d.quota.release(res);
      this.d.quota.dropCheckpoint(r.requestId);
      (this.d.log ?? stdLogger).error('settlement.unrecorded', { id: r.requestId, msg: 'settlement could not be recorded; nothing was charged' }, e);
      out = 0;
    }
    if (typeof out === 'number') return void r.onSettled();
    return out.then(
      () => r.onSettled(),
      // QuotaService has logged the row; the response still goes out.
      () => r.onSettled(),
    );
  }

  private target(ch: RelayChannel, key: RelayKey, model: string, extraHeaders = ch.headers): UpstreamTarget {
    return { baseUrl: ch.baseUrl, apiKey: key.apiKey, extraHeaders, upstreamModel: ch.modelMapping[model] ?? model, timeoutMs: ch.timeoutMs, reasoningEcho: ch.reasoningEcho,
      ...(this.streamOptions.refuses(ch) ? { streamUsage: false } : {}), ...(this.d.config.mediaUrlAllowPrivate ? { allowPrivateMediaUrls: true } : {}) };
  }

  /**
   * One channel attempt: a key refused by the upstream is set aside and the next usable key of the same
   * channel is tried at once, within this attempt (it does not use up RELAY_MAX_ATTEMPTS).
   */
  private async attempt(ch: RelayChannel, r: Admitted, plan: ChannelPlan, res: Reservation, attempts: number): Promise<Attempt> {
    const tried = new Set<number>();
    let last: Attempt | null = null;
    for (let key = this.picker.pick(ch, tried); key; key = this.picker.pick(ch, tried)) {
      tried.add(key.id);
      last = await this.attemptWithKey(ch, key, r, plan, res, attempts);
      if (last.ok || !last.keyRefused || r.signal?.aborted) return last;
    }
    return last ?? { ok: false, retryable: true, error: new GatewayError(503, 'no_healthy_channel', 'No usable upstream key is left on this channel') };
  }

  private async attemptWithKey(ch: RelayChannel, key: RelayKey, r: Admitted, plan: ChannelPlan, res: Reservation, attempts: number): Promise<Attempt> {
    const adapter = this.d.adapter(ch.type);
    const target = this.target(ch, key, r.body.model, plan.headers?.extra);
    const scrubber = lazyScrubber(target, ch);
    const ctrl = new AbortController();
    const onClientAbort = () => ctrl.abort(r.signal?.reason ?? new DOMException('client closed the request', 'AbortError'));
    r.signal?.addEventListener('abort', onClientAbort, { once: true });
    let timedOut = false;
    let timeoutWhy = `timeout after ${ch.timeoutMs} ms`;
    let timer: ReturnType<typeof setTimeout> | undefined = setTimeout(() => { timedOut = true; ctrl.abort(new DOMException(`no answer within ${ch.timeoutMs} ms`, 'TimeoutError')); }, ch.timeoutMs);
    // The first-byte deadline is separate from the idle timeout: a silent upstream is left early for another channel.
    const fb = ch.firstByteTimeoutMs;
    let firstByteTimer = fb ? setTimeout(() => {
      timedOut = true;
      timeoutWhy = `no first byte within ${fb} ms`;
      ctrl.abort(new DOMException(timeoutWhy, 'TimeoutError'));
    }, fb) : undefined;
    const firstByte = () => { clearTimeout(firstByteTimer); firstByteTimer = undefined; };
    const done = () => { clearTimeout(timer); timer = undefined; firstByte(); r.signal?.removeEventListener('abort', onClientAbort); };
    // Every failure goes through the one classifier: only the upstream's own faults touch health or fail over.
    const fail = (f: FailureInput, why: string, upstream?: { status: number; message: string; body: string }): Attempt | Promise<Attempt> => {
      done();
      const v = judgeFailure(f, r.signal);
      if (v.fault === 'upstream' || v.rateLimited) this.d.observeAttempt?.(ch.id, v.rateLimited ? 'rate_limited' : 'error');
      if (v.fault === 'upstream') this.d.keys?.used(ch.id, key, false);
      const reason = () => scrubber().scrub(timedOut ? timeoutWhy : why);
      // A refused key is the key's fault, not the channel's: it is set aside and the channel keeps its health.
      const keys = this.d.keys;
      if (keys && upstream && v.fault === 'upstream' && isKeyRefusal(upstream.status, upstream.body)) {
        // A probe with the same key decides first: the client may have caused the refusal with its content.
        // Started by the health check itself, in the step that checks the relay is not stopped (see keyRefused), and
        // not awaited here: this attempt moves on to the next key it has not tried. Later requests skip the key at once
        // (the stored disable reaches the registry a round trip or more later on PostgreSQL).
        const setAside = async () => {
          this.picker.setAside(ch, key.id);
          await keys.refused(ch.id, { id: key.id, fingerprint: key.fingerprint }, reason())
            .catch((err) => this.d.log?.error('channel.key_refusal_failed', { channel: ch.id, key: key.id, cause: errorText(err) }));
        };
        return this.d.health.keyRefused(ch.id, key, setAside).then((refused): Attempt => {
          // The key works: the upstream refused this request, not the key, so no other key of this channel is tried
          // with it. Another channel may still serve it (another account, another model access): the usual failover,
          // capped by RELAY_MAX_ATTEMPTS, which touches no key's or channel's health.
          if (!refused) return { ok: false, retryable: v.retryable, error: v.error };
          return { ok: false, retryable: v.retryable, error: v.error, keyRefused: true };
        });
      }
      if (countsAsFailure(ch.failureRules ?? {}, upstream?.status ?? null, upstream?.message ?? '', v.health)) void this.d.health.failure(ch.id, reason());
      return { ok: false, retryable: v.retryable, error: v.error };
    };
    let upstream: Response;
    let sentMaxTokens: number | undefined;
    let refusal: string | undefined;
    try {
      const p = applyHeaderPolicy(ch.headerPolicy, r.headers);
      const forwardedHeaders = plan.headers?.forwarded ?? p.forwarded;
      const sent = applyBodyPolicy(ch.headerPolicy, plan.body);
      sentMaxTokens = sent.max_tokens;
      const u = adapter.buildMessagesRequest(sent, { ...target, forwardedHeaders }, p.clientHeaders);
      if (r.signal?.aborted) return fail({ phase: 'transport', cause: r.signal.reason }, 'client closed');
      // A stream is asked for uncompressed: a compressed one makes the gateway decode what the upstream never sent.
      const init = (q: UpstreamRequest) => (r.body.stream === true ? identityEncoding(q.init) : q.init);
      const call = (q: UpstreamRequest) =>
        fetch(q.url, { ...(r.body.stream === true && q.init.body.length >= RELEASED_BODY_CHARS ? releasedOnceSent(init(q)) : init(q)), signal: ctrl.signal });
      try {
        upstream = await call(u);
        // A 400 naming stream_options: sent once more without it, on the same channel (see stream-options.ts).
        if (upstream.status === 400 && r.body.stream === true && target.streamUsage !== false) {
          refusal = await readPrefix(upstream, ERROR_BODY_BYTES).catch(() => '');
          const again = namesStreamOptions(refusal) ? adapter.buildMessagesRequest(sent, { ...target, forwardedHeaders, streamUsage: false }, p.clientHeaders) : null;
          if (again && again.init.body !== u.init.body) {
            upstream = await call(again);
            refusal = undefined;
            // Learnt only when nothing of the client's names it: an upstream 400 quoting the client's text, then an
            // accepted retry (a flaky filter, a rate rule), let one client switch the channel's usage off for an hour.
            if (upstream.ok && !namesStreamOptions(again.init.body)) this.streamOptions.learn(ch);
          }
        }
      } catch (e) {
        return fail({ phase: 'transport', cause: e, timedOut }, `connect error: ${(e as Error)?.message ?? e}`);
      }
    } catch (e) {
      // Any throw while building the request (untranslatable content, a stack overflow on a deep body) is the client's.
      return fail({ phase: 'build', cause: e }, 'request could not be built');
    }
    if (!upstream.ok) {
      const text = refusal ?? await readPrefix(upstream, ERROR_BODY_BYTES).catch(() => '');
      return fail({ phase: 'status', classified: clientNotFound(adapter.classifyError(upstream.status, text, upstream.headers, scrubber(), sentMaxTokens), ch, plan.body, r.body) }, `HTTP ${upstream.status}`,
        { status: upstream.status, message: upstreamMessage(text), body: text });
    }
    if (r.body.stream !== true) {
      firstByte();
      // Bounded like every other upstream read: an endless or giant body must not be buffered whole.
      const body = await readResponseBounded(upstream, RESPONSE_BODY_BYTES);
      if (!body.ok && body.reason === 'too_large') {
        return fail({ phase: 'decode', cause: new GatewayError(502, 'upstream_bad_response', `The upstream response body exceeds ${RESPONSE_BODY_BYTES} bytes`) }, 'response body too large');
      }
      if (!body.ok) return fail({ phase: 'transport', cause: new Error('response body cut'), timedOut }, 'bad or cut response body');
      // Native answers pass through as bytes (usage read from the tail); the rest are decoded and re-serialised.
      // An answer whose usage counts nothing is decoded, so its content can be measured (see zeroOutput).
      const bytesPassed = adapter.passMessagesResponse?.(body.bytes, plan.body.model, codeExecutionToolAt(plan.body) >= 0) ?? null;
      const passed = bytesPassed && countsNothing(bytesPassed.usage) ? null : bytesPassed;
      let out: string | Uint8Array;
      let usage: Usage | null;
      let estimate: Partial<TokenUsage> | undefined;
      // Code-execution calls are counted in the content: when the request offered the tool, an answer that may hold
      // one is never passed as bytes (json-pass.ts).
      let codeExecution = 0;
      if (passed) {
        out = passed.body;
        usage = passed.usage;
        estimate = { input: uncachedOf(billOf(plan).limits.input, usage) };
      } else {
        // Its cost is its number of values, not its bytes (jsonShapeWithin): measured before anything is built.
        if (!jsonShapeWithin(body.bytes, ANSWER_MAX_DEPTH, ANSWER_MAX_VALUES)) {
          return fail({ phase: 'decode', cause: badUpstreamResponse('too many JSON values or nested too deep') }, 'response body too many values');
        }
        let json: unknown;
        try {
          json = JSON.parse(Buffer.from(body.bytes.buffer, body.bytes.byteOffset, body.bytes.byteLength).toString('utf8'));
        } catch {
          // The whole body arrived (a cut one fails above): an answer that is not JSON (an HTML page) is a bad answer,
          // not an unreachable upstream.
          return fail({ phase: 'decode', cause: badUpstreamResponse('not JSON') }, 'response body not JSON');
        }
        // A 200 whose body is an error is judged as the status its type stands for, as a stream beginning with one is.
        // One that also carries an answer (`choices`, `content`) is an answer: a proxy writing an empty or stale error
        // member beside it would otherwise have every good answer failed over and paid for twice.
        const errorBody = carriesAnswer(json) ? null : errorBodyOf(json, scrubber);
        if (errorBody) return fail({ phase: 'status', classified: clientNotFound(errorBody, ch, plan.body, r.body) }, '200 with an error body');
        let decoded;
        try {
          decoded = adapter.decodeMessagesResponse(json, decodeContextFor(plan.body, { inputTokens: plan.measure.estimate }));
          // JSON.parse takes any depth, JSON.stringify overflows the stack near 100,000 levels: an answer nested that
          // deep (a few hundred kB of brackets) is a bad answer that fails over, not a 502 that skipped the failover.
          out = JSON.stringify(decoded.message);
        } catch (e) {
          return fail({ phase: 'decode', cause: e instanceof RangeError ? badUpstreamResponse('nested too deep') : e }, 'undecodable response');
        }
        usage = zeroOutput(decoded.usage, decoded.message.content);
        codeExecution = countCodeExecutionCalls(decoded.message.content);
        // Missing or unusable counts are billed on estimates (input: what was reserved for it), never for free.
        // With no usage at all, the estimate the client was sent is billed, as in a stream. The content serialised
        // above, within the answer, so it serialises here too.
        const sent = usage ? undefined : decoded.estimatedUsage;
        estimate = sent ? { input: sent.input_tokens, output: sent.output_tokens }
          : { input: uncachedOf(billOf(plan).limits.input, usage), output: estimateTextTokens(JSON.stringify(decoded.message.content ?? '')) };
        estimate.codeExecution = codeExecution;
        if (usage) Object.assign(estimate, cacheFallback(ch, billOf(plan)));
      }
      done();
      this.d.health.success(ch.id);
      this.d.observeAttempt?.(ch.id, 'ok');
      this.d.keys?.used(ch.id, key, true);
      // Recorded before the response leaves: a completed request is never left unbilled by a crash.
      const settled = this.settle(res, r.ticket, ch, billOf(plan), usage ? answerTokens(usage, codeExecution) : null, { status: 200, errorCode: '', attempts, ttftMs: since(r.startedAt), estimate });
      const headers = { 'content-type': 'application/json', 'request-id': r.requestId };
      // SQLite: settled (journaled) already. PostgreSQL: the body goes out now and its last byte after the commit.
      if (!settled) return { ok: true, channel: ch, response: new Response(out, { status: 200, headers }) };
      return { ok: true, channel: ch, response: new Response(heldTail(typeof out === 'string' ? utf8.encode(out) : out, settled), { status: 200, headers }) };
    }
    const ctx = decodeContextFor(plan.body, { inputTokens: plan.measure.estimate, maxEventBytes: this.d.config.sseMaxEventBytes });
    // Streaming: wait for the first upstream chunk before committing to this channel, so a channel that
    // accepts and then dies before sending anything is still retried elsewhere.
    const reader = upstream.body!.getReader() as ReadableStreamDefaultReader<Uint8Array>;
    let start: StreamStart;
    const empty = () => fail({ phase: 'decode', cause: new GatewayError(502, 'upstream_empty_stream', 'The upstream sent an empty stream') }, 'empty stream');
    try {
      await turnOver();
      const first = await reader.read();
      if (first.done) return empty();
      firstByte(); // it came: what follows until the verdict is bounded by readStreamStart, not by the first-byte deadline
      // Read on until the first event with content shows whether the stream begins with an error (keep-alive comments,
      // an event split across chunks, a role-only delta or message_start before it), within bounds: nothing is committed yet.
      start = await readStreamStart(reader, first.value, new StreamStartJudge(scrubber));
    } catch (e) {
      return fail({ phase: 'transport', cause: e, timedOut }, 'stream failed before the first byte');
    }
    // An HTML page or a JSON body on a 200 (a proxy's error page, an upstream ignoring `stream`) is no event stream:
    // refused before anything is committed, so the request fails over instead of ending in an error event.
    // Ended with nothing but comments or pings: as empty as a stream without a byte, and still uncommitted.
    if (start.empty) return empty();
    if (start.notEventStream) {
      reader.cancel().catch(() => {});
      return fail({ phase: 'decode', cause: badUpstreamResponse('not an event stream') }, 'not an event stream');
    }
    // A stream that begins with an error is judged as the status its type stands for: nothing was sent yet.
    if (start.error) {
      reader.cancel().catch(() => {});
      return fail({ phase: 'status', classified: clientNotFound(start.error, ch, plan.body, r.body) }, 'stream began with an error event');
    }
    done();
    this.d.health.success(ch.id);
    this.d.observeAttempt?.(ch.id, 'ok');
    this.d.keys?.used(ch.id, key, true);
    const cfg = this.d.config;
    const bill = billOf(plan);
    const response = await relayStream({
      reader, first: start.bytes, pending: start.pending, decoder: adapter.createStreamDecoder(ctx), signal: r.signal, requestId: r.requestId, startedAt: r.startedAt,
      idleMs: ch.timeoutMs, stallMs: cfg.streamStallMs, maxMs: cfg.streamMaxMs, bufferBytes: cfg.streamBufferBytes, keepAliveMs: cfg.sseKeepAliveMs,
      onEnd: this.streamEnd(res, r.ticket, ch, bill, attempts, scrubber), holdEnd: this.d.quota.commitsLater,
      ...(isCompressed(upstream.headers) ? { decodedBound: new DecodedBound() } : {}),
      ...(this.d.quota.keepsUnfinished ? { checkpointMs: STREAM_CHECKPOINT_MS, onCheckpoint: this.streamCheckpoint(res, r.ticket, ch, bill, attempts) } : {}),
    });
    return { ok: true, channel: ch, response };
  }

  /** A stream's settlement, built apart from the attempt so the stream holds only what it needs (not the attempt's scope). */
  private streamEnd(res: Reservation, ticket: Ticket, ch: RelayChannel, bill: PlanBill, attempts: number, scrubber: () => Scrubber) {
    return (e: StreamEnd) => {
      if (e.upstreamFault) void this.d.health.failure(ch.id, scrubber().scrub(e.reason));
      return this.settle(res, ticket, ch, bill, answerTokens(e.usage, e.codeExecutionCalls), streamOutcome(ch, bill, attempts, e));
    };
  }

  /**
   * A long stream's checkpoint: what its settlement would be were it cut now (gateway_crashed), kept until it
   * settles, so a process death (kill -9, a crash, the OOM killer) bills it once, as a client leaving would have
   * been (the next start on SQLite; the leader once its hold lapses on PostgreSQL). Never fails the stream.
   */
  private streamCheckpoint(res: Reservation, ticket: Ticket, ch: RelayChannel, bill: PlanBill, attempts: number) {
    return (e: StreamEnd) => {
      try {
        this.d.quota.checkpoint(res, usageLog(ticket, ch, bill, answerTokens(e.usage, e.codeExecutionCalls), streamOutcome(ch, bill, attempts, e)));
      } catch (err) {
        (this.d.log ?? stdLogger).error('settlement.checkpoint_failed', { id: ticket.requestId, msg: 'the stream goes on; a process death now would not bill it' }, err);
      }
    };
  }
}

type SettleOutcome = { status: number; errorCode: string; attempts: number; ttftMs: number | null; estimate?: Partial<TokenUsage>; estimated?: boolean };

/**
 * A usage of zeros for a JSON answer with content is no count (a proxy filling in 0 where its provider reported
 * nothing): the output is billed on the estimate of the content, like a count left out (the stream decoders do the same).
 */
function zeroOutput(usage: Usage | null, content: unknown): Usage | null {
  if (!countsNothing(usage) || !Array.isArray(content) || !content.length) return usage;
  return { ...usage!, output_tokens: undefined as unknown as number };
}

/** Whether a decoded 200 body holds an answer (OpenAI `choices`, Anthropic `content`), whatever else it holds. */
function carriesAnswer(j: unknown): boolean {
  return !!j && typeof j === 'object' && (Array.isArray((j as { choices?: unknown }).choices) || Array.isArray((j as { content?: unknown }).content));
}

/**
 * No input of any kind (input, cache reads and cache writes all 0) is no count: every request has a prompt. Proxies
 * fill in 0 where their provider reported nothing, and Anthropic-compatible ones send `input_tokens: 0` in
 * message_start with the real count only in the last message_delta, so a stream cut (or left by its client) before it
 * billed the prompt as free. Billed like a count left out: the reserved input bound, flagged `estimated`. For an answer's
 * usage only (a failed request is settled with no usage at all, ZERO, and billed nothing).
 */
function answerTokens(u: Usage, codeExecution?: number): UsageReport {
  const t = toTokens(u, codeExecution);
  return t.input === 0 && noCount(t.cacheRead) && noCount(t.cacheWrite) ? { ...t, input: undefined } : t;
}

/** The usage row of a request's settlement (or of a stream's checkpoint). */
function usageLog(r: Ticket, ch: RelayChannel | null, plan: PlanBill | null, usage: UsageReport | null, o: SettleOutcome) {
  return {
    requestId: r.requestId, userId: r.key.userId, apiKeyId: r.key.id, channelId: ch?.id ?? null, model: r.model,
    upstreamModel: ch ? ch.modelMapping[r.model] ?? r.model : '', stream: r.stream, usage,
    estimate: o.estimate, estimated: o.estimated, latencyMs: since(r.startedAt), ttftMs: o.ttftMs, status: o.status, errorCode: o.errorCode, attempts: o.attempts, ip: r.ip,
    group: r.group, ratio: r.ratio,
    // The serving channel's plan: its price, its plausibility limits, its overrides.
    ...(plan ?? {}),
  };
}

/** How a stream's end is billed: as reported, else on the estimate of what was delivered. */
function streamOutcome(ch: RelayChannel, bill: PlanBill, attempts: number, e: StreamEnd): SettleOutcome {
  return {
    status: 200, errorCode: e.errorCode, attempts, ttftMs: e.ttftMs,
    estimate: {
      input: atLeast(uncachedOf(bill.limits.input, e.usage), e.peak?.input_tokens), output: estimateSafe(e.estimatedUsage.output_tokens), codeExecution: e.codeExecutionCalls,
      ...cacheFallback(ch, bill, e.peak),
    }, estimated: !e.reported,
  };
}

/**
 * A stream's checkpoint interval: a process death loses at most this much of a stream's output from its bill,
 * and a stream shorter than this (most of them) writes none.
 */
const STREAM_CHECKPOINT_MS = 1000;

/**
 * Bun's fetch keeps a string (or buffer) body until the whole response has been read, so every held stream
 * kept its prompt, often hundreds of kB of conversation, for its whole life (measured: +68 kB per held stream
 * with a 64 kB prompt). A one-chunk stream is let go once sent; the explicit content-length keeps the request
 * unchunked, the same bytes on the wire as the string. A stream body costs Bun's fetch about 0.1-0.2 ms of CPU
 * per request (measured), so a prompt under RELEASED_BODY_CHARS (at most that much kept per stream) is sent as it is.
 */
const RELEASED_BODY_CHARS = 8 * 1024;
function releasedOnceSent(init: UpstreamRequest['init']): RequestInit {
  let bytes: Uint8Array | null = Buffer.from(init.body);
  const headers = { ...init.headers, 'content-length': String(bytes.byteLength) };
  const body = new ReadableStream<Uint8Array>({
    pull(c) {
      c.enqueue(bytes!);
      bytes = null;
      c.close();
    },
  });
  return { method: init.method, redirect: init.redirect, headers, body };
}

/**
 * A non-streaming response body is read up to this much. The largest real reply (128k output tokens of
 * text or tool JSON) is a few MB; past this the upstream is misbehaving and the attempt fails over.
 */
const RESPONSE_BODY_BYTES = 32 * 1024 * 1024;

/** An upstream error body is read up to this much: only its message is ever used. */
const ERROR_BODY_BYTES = 64 * 1024;

/** The first `max` bytes of a body as text, the rest not read (unlike @gw/core readCapped, which refuses a longer body: an error message is still useful cut). */
async function readPrefix(res: Response, max: number): Promise<string> {
  if (!res.body) return '';
  const reader = res.body.getReader();
  const parts: Uint8Array[] = [];
  let n = 0;
  while (n < max) {
    const { done, value } = await reader.read();
    if (done) break;
    parts.push(value);
    n += value.byteLength;
  }
  reader.cancel().catch(() => {});
  return new TextDecoder().decode(Buffer.concat(parts).subarray(0, max));
}

/**
 * A client may raise the upstream's context window with a beta (Anthropic's `context-1m-*`). The request's
 * reservation and its usage clamp must follow, or input read past the configured window would be free.
 */
const LONG_CONTEXT_BETA = /(?:^|,)\s*context-1m-/i;
const LONG_CONTEXT_TOKENS = 1_000_000;
function betaContextTokens(beta: string | null | undefined): number {
  return beta && LONG_CONTEXT_BETA.test(beta) ? LONG_CONTEXT_TOKENS : 0;
}

/** The upstream names `model` is mapped to by `channels` (own mapping entries only), other than itself. */
function mappedNames(channels: RelayChannel[], model: string): string[] {
  let out: string[] | null = null;
  for (const c of channels) {
    const m = Object.hasOwn(c.modelMapping, model) ? c.modelMapping[model] : undefined;
    if (typeof m === 'string' && m !== model && !out?.includes(m)) (out ??= []).push(m);
  }
  return out ?? NO_NAMES;
}
const NO_NAMES: string[] = [];

const unknownModel = (model: string) =>
  new GatewayError(404, 'model_not_found', `Model ${model} is not served by this gateway`, { param: 'model', type: 'invalid_request_error' });


