/**
 * The one place upstream-reported usage is checked before it becomes money. Every settlement goes
 * through QuotaService, which calls guardUsage, so no path (JSON, SSE, native, translated, realtime,
 * replay of a cut stream) can bill a count that is not a non-negative safe integer or that exceeds what
 * the request could plausibly have used.
 */
import type { TokenUsage } from './usage';

/** What a request can plausibly use: set when its reservation is made. */
export interface UsageLimits {
  /** Input tokens of every kind together (uncached + cache reads + cache writes + audio): the context window. */
  maxInput: number;
  /** Output tokens of every kind together: the request's max output tokens. */
  maxOutput: number;
  /** Input tokens the reservation was computed with: the fallback for an unusable input count. */
  input: number;
}

/**
 * Why billed usage differs from the upstream's report, stored on the usage row (`usage_flag`):
 * - `estimated`: the upstream reported no usage (e.g. a cut stream); billed on the gateway's estimate;
 * - `invalid`: a count was not a non-negative safe integer (1.5, 1e400, -5, "7", NaN…); replaced by the
 *   estimate, or by what was reserved for it;
 * - `implausible`: input beyond the context window, output beyond the max output tokens, or more 1-hour
 *   cache writes than cache writes; clamped;
 * - `capped`: the charge was limited by the reservation plus what the user could still spend.
 */
export type UsageFlag = 'estimated' | 'invalid' | 'implausible' | 'capped';

const INPUT_KINDS = ['input', 'cacheRead', 'cacheWrite', 'audioInput'] as const;
const OUTPUT_KINDS = ['output', 'audioOutput'] as const;

/** null/undefined: not reported (a zero for optional kinds); a number: usable when a non-negative safe integer. */
function read(v: unknown): { ok: true; n: number } | { ok: false; absent: boolean } {
  if (v === undefined || v === null) return { ok: false, absent: true };
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return { ok: true, n: v };
  return { ok: false, absent: false };
}

/**
 * Turns a reported usage into billable counts. Per field: a usable count is kept; an unusable one is
 * replaced by `fallback` (the estimate), else by what the reservation assumed (`limits.input` for input,
 * `limits.maxOutput` for output kinds, 0 for optional kinds that were simply absent). Then each side is
 * clamped to `limits` (input side filled dearest-first: uncached, cache writes, audio, cache reads).
 * `reported` null means no report at all: the fallback is billed and flagged `estimated`.
 */
export function guardUsage(reported: Partial<Record<keyof TokenUsage, unknown>> | null | undefined,
  fallback: Partial<TokenUsage>, limits: UsageLimits | null, estimated = false): { usage: Required<TokenUsage>; flags: UsageFlag[] } {
  const flags = new Set<UsageFlag>();
  if (!reported) {
    flags.add('estimated');
    reported = fallback;
  } else if (estimated) flags.add('estimated');
  const worst = (k: keyof TokenUsage): number =>
    (OUTPUT_KINDS as readonly string[]).includes(k) ? (limits?.maxOutput ?? 0) : k === 'input' ? (limits?.input ?? 0) : 0;
  const out = {} as Required<TokenUsage>;
  for (const k of [...INPUT_KINDS, ...OUTPUT_KINDS]) {
    const r = read(reported[k]);
    if (r.ok) { out[k] = r.n; continue; }
    const fb = read(fallback[k]);
    // Optional kinds an upstream does not report are zero; the two main counts must be known.
    if (r.absent && k !== 'input' && k !== 'output') { out[k] = 0; continue; }
    if (!r.absent) flags.add('invalid');
    else flags.add('estimated');
    out[k] = fb.ok ? fb.n : worst(k);
  }
  // The 1-hour cache writes are a part of the cache writes, never an addition: an upstream claiming more
  // of them than it wrote is cut to all of them; an unusable count bills all writes at the 1-hour price.
  const h = read(reported.cacheWrite1h);
  out.cacheWrite1h = h.ok ? h.n : h.absent ? 0 : out.cacheWrite;
  if (!h.ok && !h.absent) flags.add('invalid');
  if (out.cacheWrite1h > out.cacheWrite) { out.cacheWrite1h = out.cacheWrite; flags.add('implausible'); }
  if (limits) {
    let room = limits.maxInput;
    for (const k of ['input', 'cacheWrite', 'audioInput', 'cacheRead'] as const) {
      if (out[k] > room) { out[k] = room; flags.add('implausible'); }
      room -= out[k];
    }
    out.cacheWrite1h = Math.min(out.cacheWrite1h, out.cacheWrite);
    room = limits.maxOutput;
    for (const k of OUTPUT_KINDS) {
      if (out[k] > room) { out[k] = room; flags.add('implausible'); }
      room -= out[k];
    }
  }
  return { usage: out, flags: [...flags] };
}
