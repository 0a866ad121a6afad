/** The budget shares (percent) announced once per period each, as bits of `budgets.alerted`. */
export const THRESHOLDS = [50, 80, 100] as const;

/** Bitmask of the thresholds `spent` has reached against `limit` (bit i = THRESHOLDS[i]). */
export function reachedMask(spent: number, limit: number): number {
  let mask = 0;
  // Integer comparison (spent × 100 ≥ limit × pct, in BigInt: quotas reach 1e15), so no share is rounded either way.
  THRESHOLDS.forEach((pct, i) => { if (limit > 0 && BigInt(spent) * 100n >= BigInt(limit) * BigInt(pct)) mask |= 1 << i; });
  return mask;
}

/** The thresholds in `mask`, as percentages. */
export const thresholdsOf = (mask: number): number[] => THRESHOLDS.filter((_, i) => mask & (1 << i));
