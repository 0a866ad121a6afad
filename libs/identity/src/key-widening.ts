/**
 * What an update gave a relay key that it did not have: the lines of a 'relay_key_widened' notice. A stolen
 * session or token cannot read a key back, but it can make one it already holds (or leaked earlier) worth more:
 * usable from anywhere, for any model, without a budget, forever. Only widening is reported; a change that
 * takes something away (an IP restriction added, a quota lowered, a key disabled) says nothing.
 *
 * Widening, field by field (stored values before the update against after it; 0 = unlimited for limits). `before`
 * must be the row the write replaced (ApiKeysStore.updateReplacing), not one read earlier: else an owner's narrowing
 * between the read and the write is overwritten unreported.
 * - allow_ips: cleared while it had entries, or an address the new list lets in that no old entry did (CIDR
 *   ranges compared as ranges, so 10.1.2.0/24 inside an old 10.1.0.0/16 is not widening, 10.0.0.0/8 is);
 * - models: cleared while it had names (any model now), or a name that was not on the list;
 * - quota: unlimited_quota turned on, or remain_quota raised while the key stays limited;
 * - expires_at: removed, or moved later;
 * - group: any change of the group the key routes in (a stored null is the owner's group): groups differ in
 *   channels and prices, not in an order, so every move counts;
 * - rate_limit_rpm, rate_limit_tpm, max_concurrency: raised, or set to 0 (none) from a limit;
 * - model_limits: a pattern's limit raised or removed, or a new pattern looser than the one that applied to
 *   its models before (the most specific pattern wins, so a new exact entry can lift a prefix's limit).
 * Name and status are not: bringing back a disabled or expired key is the 'relay_key_enabled' notice.
 */
import type { ApiKeyRow, ModelLimitMap } from '@gw/db';
import { parseRange } from './ip-allow';
import { quoted } from './security-notices';

export type KeyTerms = Pick<ApiKeyRow, 'expiresAt' | 'unlimitedQuota' | 'remainQuota' | 'models' | 'allowIps' | 'group'
  | 'rateLimitRpm' | 'rateLimitTpm' | 'maxConcurrency' | 'modelLimits'>;

/** Items named per field; the rest are counted ("and 3 more"), so a notice line stays bounded. */
const LISTED = 3;

/** The ways `after` reaches further than `before`, as short phrases; [] when it does not. `ownerGroup`: the group a null means. */
export function keyWidening(before: KeyTerms, after: KeyTerms, ownerGroup: string): string[] {
  const out: string[] = [];

  const oldIps = before.allowIps?.length ? before.allowIps : null;
  const newIps = after.allowIps?.length ? after.allowIps : null;
  if (oldIps && !newIps) out.push('IP allow-list removed (any address)');
  else if (oldIps && newIps) {
    // Widest first: three single addresses written before 0.0.0.0/0 must not leave it as the "and 1 more".
    const added = newIps.filter((e) => !covered(e, oldIps)).sort((x, y) => spanSize(y) - spanSize(x));
    if (added.length) out.push(`IP allow-list: now also ${list(added, ipShown)}`);
  }

  const oldModels = before.models?.length ? before.models : null;
  const newModels = after.models?.length ? after.models : null;
  if (oldModels && !newModels) out.push('models: now any');
  else if (oldModels && newModels) {
    const had = new Set(oldModels);
    const added = newModels.filter((m) => !had.has(m));
    if (added.length) out.push(`models: now also ${list(added, (m) => quoted(m, 40))}`);
  }

  if (!before.unlimitedQuota && after.unlimitedQuota) out.push('quota: unlimited');
  else if (!before.unlimitedQuota && !after.unlimitedQuota && after.remainQuota > before.remainQuota) {
    out.push(`quota: raised from ${before.remainQuota} to ${after.remainQuota}`);
  }

  if (before.expiresAt !== null && after.expiresAt === null) out.push('expiry removed (never expires)');
  else if (before.expiresAt !== null && after.expiresAt !== null && after.expiresAt > before.expiresAt) {
    out.push(`expiry extended to ${when(after.expiresAt)}`);
  }

  const oldGroup = before.group ?? ownerGroup;
  const newGroup = after.group ?? ownerGroup;
  if (oldGroup !== newGroup) out.push(`group: now "${newGroup}"${after.group === null ? " (the owner's)" : ''} instead of "${oldGroup}"`);

  const limits: Array<[keyof Limits, string]> = [['rateLimitRpm', 'requests per minute'], ['rateLimitTpm', 'tokens per minute'], ['maxConcurrency', 'concurrency']];
  for (const [f, label] of limits) {
    if (looser(after[f], before[f])) out.push(`${label}: ${shown(after[f])} instead of ${before[f]}`);
  }

  const loosened = modelLimitsLoosened(before.modelLimits ?? null, after.modelLimits ?? null);
  if (loosened.length) out.push(`per-model limits loosened for ${list(loosened, (p) => quoted(p, 40))}`);
  return out;
}

type Limits = ModelLimitMap[string];

/** `next` allows more than `prev` (0 = unlimited). */
const looser = (next: number, prev: number) => prev !== 0 && (next === 0 || next > prev);
const shown = (n: number) => (n === 0 ? 'unlimited' : String(n));
/**
 * Unix seconds as an ISO date, or as the number past year 9999 / what Date can hold: expires_at has no upper bound,
 * and a throw here would come after the write, leaving a key extended "forever" with a 500 and no notice.
 */
const when = (sec: number) => {
  const d = new Date(sec * 1000);
  return sec < 253_402_300_800 && !Number.isNaN(d.getTime()) ? d.toISOString().replace('.000Z', 'Z') : `unix time ${sec}`;
};
const anyLooser = (next: Limits, prev: Limits) =>
  looser(next.rateLimitRpm, prev.rateLimitRpm) || looser(next.rateLimitTpm, prev.rateLimitTpm) || looser(next.maxConcurrency, prev.maxConcurrency);

/** An entry as written when it is only address characters; quoted otherwise (an IPv6 zone id, `fe80::1%…`, is free text). */
const ipShown = (e: string) => (/^[0-9A-Fa-f:./[\]]+$/.test(e) ? e : quoted(e, 64));

function list<T>(items: T[], show: (x: T) => string): string {
  const named = items.slice(0, LISTED).map(show).join(', ');
  return items.length > LISTED ? `${named} and ${items.length - LISTED} more` : named;
}

/**
 * Patterns whose models may now run under looser limits. A pattern kept with a looser limit, or dropped (its models
 * fall back to a less specific pattern, or none), counts; so does a new pattern looser than the old one that governed
 * all of its models: for an exact name, the old entry that name matched; for `prefix*`, the longest old `p*` with
 * `prefix` starting with `p` (longer old patterns inside it still win over the new one, so they are unaffected).
 */
function modelLimitsLoosened(before: ModelLimitMap | null, after: ModelLimitMap | null): string[] {
  const b = before ?? {};
  const a = after ?? {};
  const out: string[] = [];
  for (const p of Object.keys(b)) {
    if (!Object.hasOwn(a, p)) {
      // Dropped: looser unless the pattern that now applies in its place is at least as strict.
      const fallback = governing(a, p);
      if (!fallback || anyLooser(fallback, b[p]!)) out.push(p);
    } else if (anyLooser(a[p]!, b[p]!)) out.push(p);
  }
  for (const p of Object.keys(a)) {
    if (Object.hasOwn(b, p)) continue;
    const prev = governing(b, p);
    if (prev && anyLooser(a[p]!, prev)) out.push(p);
  }
  return out;
}

/** In `m`, the entry other than `pattern` itself that applies to every model `pattern` covers (none: null). */
function governing(m: ModelLimitMap, pattern: string): Limits | null {
  const stem = pattern.endsWith('*') ? pattern.slice(0, -1) : pattern;
  let best: string | null = null;
  for (const p of Object.keys(m)) {
    if (!p.endsWith('*') || p === pattern) continue;
    const pre = p.slice(0, -1);
    if (stem.startsWith(pre) && (best === null || pre.length > best.length - 1)) best = p;
  }
  return best === null ? null : m[best]!;
}

/** Whether every address of `entry` is let in by some entry of `list` (ranges merged, so two halves cover the whole). */
function covered(entry: string, list: string[]): boolean {
  const r = span(entry);
  if (!r) return true; // not a valid entry: it lets nothing in (and validation refuses it anyway)
  const spans = list.map(span).filter((s): s is Span => s !== null && s.v === r.v).sort((x, y) => (x.lo < y.lo ? -1 : x.lo > y.lo ? 1 : 0));
  let reach = r.lo - 1n; // every address up to `reach` from r.lo on is covered
  for (const s of spans) {
    if (s.lo > reach + 1n) break;
    if (s.hi > reach) reach = s.hi;
    if (reach >= r.hi) return true;
  }
  return reach >= r.hi;
}

interface Span { v: 4 | 6; lo: bigint; hi: bigint }

/** log2 of the addresses an entry lets in (IPv6 ranges count as wider than any IPv4 one of the same prefix room). */
function spanSize(entry: string): number {
  const r = parseRange(entry);
  return r ? (r.v === 4 ? 32 : 128) - r.bits : -1;
}

function span(entry: string): Span | null {
  const r = parseRange(entry);
  if (!r) return null;
  const width = r.v === 4 ? 32n : 128n;
  return { v: r.v, lo: r.net, hi: r.net + (1n << (width - BigInt(r.bits))) - 1n };
}
