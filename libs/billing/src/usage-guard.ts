/**
 * The one place upstream-reported usage is checked before it becomes money. Every settlement goes
 * through QuotaService, which calls guardUsage, so no path (JSON, SSE, native, translated, realtime,
 * replay of a cut stream) can bill a count that is not a non-negative safe integer or that exceeds what
 * the request could plausibly have used.
 */
import type { TokenUsage } from './usage';

/** What a request can plausibly use: set when its reservation is made. */
export interface UsageLimits {
  /** Input tokens of every kind together (uncached + cache reads + cache writes + audio): the context window (× the samplings of a server-tool loop). */
  maxInput: number;
  /**
   * The most input one sampling holds (the context window), when `maxInput` is several of them: the tier is chosen by at
   * most this. A server-tool loop's reported input sums its samplings, and a sum above the long-context threshold put
   * the whole request in that tier though no sampling of it could reach it.
   */
  samplingInput?: number;
  /** Output tokens of every kind together: the request's max output tokens. */
  maxOutput: number;
  /** Input tokens the reservation was computed with: the fallback for an unusable input count. */
  input: number;
  /**
   * Web searches the request may make: the sum of its web-search tools' (capped) max_uses. The reported
   * count is clamped to it, and an unusable one replaced by it. Absent = 0 (no web-search tool).
   */
  maxWebSearch?: number;
  /**
   * Code-execution calls the request may be billed: CODE_EXECUTION_MAX_CALLS when it has a code-execution tool.
   * A counted number is clamped to it. Absent = 0 (no code-execution tool).
   */
  maxCodeExecution?: number;
}

/**
 * Why billed usage differs from the upstream's report, stored on the usage row (`usage_flag`):
 * - `estimated`: the upstream reported no usage (e.g. a cut stream); billed on the gateway's estimate;
 * - `invalid`: a count was not a non-negative safe integer (1.5, 1e400, -5, "7", NaN…); replaced by the
 *   estimate, or by what was reserved for it (web searches: the bound, Σ max_uses);
 * - `implausible`: input beyond the context window (one per sampling of a server-tool loop), output beyond the max output tokens, more 1-hour
 *   cache writes than cache writes, more web searches than the request's max_uses allow, or more code-execution
 *   calls than CODE_EXECUTION_MAX_CALLS (none without a code-execution tool); clamped;
 * - `capped`: the charge was limited by the reservation plus what the user could still spend.
 */
export type UsageFlag = 'estimated' | 'invalid' | 'implausible' | 'capped';

/** A stored usage_flag (comma-separated) with `flag` in it, added at the end if missing. */
export function withFlag(usageFlag: string | undefined, flag: UsageFlag): string {
  const flags = usageFlag ? usageFlag.split(',') : [];
  return flags.includes(flag) ? usageFlag! : [...flags, flag].join(',');
}

const INPUT_KINDS = ['input', 'cacheRead', 'cacheWrite', 'audioInput'] as const;
const OUTPUT_KINDS = ['output', 'audioOutput'] as const;
const ALL_KINDS = [...INPUT_KINDS, ...OUTPUT_KINDS] as const;
const IS_OUTPUT: Record<string, boolean> = { output: true, audioOutput: true };

// Runs on every settlement: plain numbers instead of a result object per field.
const ABSENT = -1;
const INVALID = -2;
/** null/undefined: not reported (ABSENT, a zero for optional kinds); a number: usable when a non-negative safe integer, else INVALID. */
function read(v: unknown): number {
  if (v === undefined || v === null) return ABSENT;
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : INVALID;
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
  const flags: UsageFlag[] = [];
  const flag = (f: UsageFlag) => { if (!flags.includes(f)) flags.push(f); };
  if (!reported) {
    flag('estimated');
    reported = fallback;
  } else if (estimated) flag('estimated');
  const out = {} as Required<TokenUsage>;
  for (const k of ALL_KINDS) {
    const r = read(reported[k]);
    if (r >= 0) { out[k] = r; continue; }
    const fb = read(fallback[k]);
    // Optional kinds an upstream does not report are zero; the two main counts must be known.
    if (r === ABSENT && k !== 'input' && k !== 'output') { out[k] = 0; continue; }
    flag(r === ABSENT ? 'estimated' : 'invalid');
    out[k] = fb >= 0 ? fb : IS_OUTPUT[k] ? (limits?.maxOutput ?? 0) : k === 'input' ? (limits?.input ?? 0) : 0;
  }
  // The 1-hour cache writes are a part of the cache writes, never an addition: an upstream claiming more
  // of them than it wrote is cut to all of them; an unusable count bills all writes at the 1-hour price.
  const h = read(reported.cacheWrite1h);
  out.cacheWrite1h = h >= 0 ? h : h === ABSENT ? 0 : out.cacheWrite;
  if (h === INVALID) flag('invalid');
  if (out.cacheWrite1h > out.cacheWrite) { out.cacheWrite1h = out.cacheWrite; flag('implausible'); }
  // Web searches are billed per search: none reported is none; an unusable count is billed at the bound
  // the reservation was sized with; more than the tools' max_uses allow is clamped to it. The fallback
  // (a cut stream's count so far) stands in for a report that has none.
  const maxSearch = limits ? Math.max(0, limits.maxWebSearch ?? 0) : Number.MAX_SAFE_INTEGER;
  let ws = read(reported.webSearch);
  if (ws === ABSENT) ws = read(fallback.webSearch);
  if (ws === INVALID) { flag('invalid'); ws = limits ? maxSearch : 0; }
  out.webSearch = ws >= 0 ? ws : 0;
  if (out.webSearch > maxSearch) { out.webSearch = maxSearch; flag('implausible'); }
  // Code-execution calls, the same way (the gateway counts them itself, so a count is normally usable): clamped
  // to the bound the reservation was sized with.
  const maxCode = limits ? Math.max(0, limits.maxCodeExecution ?? 0) : Number.MAX_SAFE_INTEGER;
  let ce = read(reported.codeExecution);
  if (ce === ABSENT) ce = read(fallback.codeExecution);
  if (ce === INVALID) { flag('invalid'); ce = limits ? maxCode : 0; }
  out.codeExecution = ce >= 0 ? ce : 0;
  if (out.codeExecution > maxCode) { out.codeExecution = maxCode; flag('implausible'); }
  if (limits) {
    let room = limits.maxInput;
    for (const k of ['input', 'cacheWrite', 'audioInput', 'cacheRead'] as const) {
      if (out[k] > room) { out[k] = room; flag('implausible'); }
      room -= out[k];
    }
    out.cacheWrite1h = Math.min(out.cacheWrite1h, out.cacheWrite);
    room = limits.maxOutput;
    for (const k of OUTPUT_KINDS) {
      if (out[k] > room) { out[k] = room; flag('implausible'); }
      room -= out[k];
    }
  }
  return { usage: out, flags };
}
