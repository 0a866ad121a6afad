/**
 * Per-channel auto-disable rules: which upstream answers count as failures, and how many within which
 * window disable the channel. `{}` keeps the global behaviour (RELAY_HEALTH_FAILURES failures in a row).
 */
import { Type, type Static } from '@sinclair/typebox';
import { GatewayError } from '@gw/core';
import type { ChannelFailureRules } from '@gw/db';

const RANGES = '^\\s*\\d{3}(\\s*-\\s*\\d{3})?(\\s*,\\s*\\d{3}(\\s*-\\s*\\d{3})?)*\\s*$';

export const FailureRulesSchema = Type.Object({
  statuses: Type.Optional(Type.String({ maxLength: 200, pattern: RANGES, description: 'Upstream HTTP statuses that count as failures, e.g. "500-599,408". Absent: every upstream fault counts (5xx, 408/409, 401-404, redirects); timeouts, cut connections and bad bodies always count', error: 'must be statuses or ranges like "500-599,408"' })),
  keywords: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 100 }), { maxItems: 20, description: 'An upstream error whose message contains one of these (case-insensitive) also counts' })),
  failures: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, description: 'Failures that auto-disable the channel (default RELAY_HEALTH_FAILURES)' })),
  window_requests: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, description: 'Counted among this many latest requests (default = failures, i.e. consecutive)' })),
  window_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 86_400, description: 'And only those younger than this many seconds (default: no age limit)' })),
}, { description: 'Auto-disable rules; {} = the global defaults' });
export type FailureRules = Static<typeof FailureRulesSchema>;

/** Checks what the schema cannot (ranges in order, window not smaller than the failure count). */
export function normalizeFailureRules(r: FailureRules | undefined): ChannelFailureRules {
  const out: ChannelFailureRules = {};
  if (!r) return out;
  if (r.statuses !== undefined) {
    parseStatusRanges(r.statuses);
    out.statuses = r.statuses.replace(/\s+/g, '');
  }
  if (r.keywords?.length) out.keywords = [...new Set(r.keywords.map((k) => k.trim().toLowerCase()).filter(Boolean))];
  if (r.failures !== undefined) out.failures = r.failures;
  if (r.window_requests !== undefined) out.window_requests = r.window_requests;
  if (r.window_seconds !== undefined) out.window_seconds = r.window_seconds;
  if (out.failures !== undefined && out.window_requests !== undefined && out.window_requests < out.failures) {
    throw new GatewayError(400, 'invalid_value', 'failure_rules.window_requests must be at least failure_rules.failures', { param: 'failure_rules.window_requests' });
  }
  return out;
}

/** "500-599,408" → [[500,599],[408,408]]; throws 400 on a reversed or out-of-range bound. */
export function parseStatusRanges(s: string): Array<[number, number]> {
  return s.replace(/\s+/g, '').split(',').map((part) => {
    const [a, b = a] = part.split('-').map(Number) as [number, number?];
    if (a! < 100 || b! > 599 || a! > b!) {
      throw new GatewayError(400, 'invalid_value', `failure_rules.statuses: "${part}" is not a status or range between 100 and 599`, { param: 'failure_rules.statuses' });
    }
    return [a!, b!];
  });
}
