/**
 * Applies a channel's `failure_rules` to one failed attempt: does it count toward auto-disabling the
 * channel? Without rules the classifier's verdict stands (every upstream fault but 429 counts).
 */
import { parseStatusRanges } from '@gw/channels';
import type { ChannelFailureRules } from '@gw/db';

interface Compiled { ranges: Array<[number, number]> | null; keywords: string[] }
const compiled = new WeakMap<ChannelFailureRules, Compiled>();

function compile(r: ChannelFailureRules): Compiled {
  let c = compiled.get(r);
  if (!c) compiled.set(r, (c = { ranges: r.statuses ? parseStatusRanges(r.statuses) : null, keywords: r.keywords ?? [] }));
  return c;
}

/**
 * `status` is the upstream's HTTP status (null for timeouts, cut connections, bad bodies: those always
 * count when the classifier says so); `message` its error text; `byDefault` the classifier's verdict.
 */
export function countsAsFailure(rules: ChannelFailureRules, status: number | null, message: string, byDefault: boolean): boolean {
  const c = compile(rules);
  if (status !== null && c.keywords.length) {
    const m = message.toLowerCase();
    if (c.keywords.some((k) => m.includes(k))) return true;
  }
  if (status === null || !c.ranges) return byDefault;
  return c.ranges.some(([a, b]) => status >= a && status <= b);
}
