/**
 * The request limits a key, a user or a group may carry (0 = unlimited), as one set of API fields so
 * the three records validate and show them identically.
 */
import { Type } from '@sinclair/typebox';

export const Rpm = Type.Integer({ minimum: 0, maximum: 1_000_000, description: 'Requests per minute; 0 = unlimited' });
export const Tpm = Type.Integer({ minimum: 0, maximum: 1e12, description: 'Tokens per minute (input bound + max_tokens, counted at admission); 0 = unlimited' });
export const Concurrency = Type.Integer({ minimum: 0, maximum: 100_000, description: 'Requests in flight at once; 0 = unlimited' });

/** Optional limit fields of a create/update body. */
export const LimitInput = {
  rate_limit_rpm: Type.Optional(Rpm),
  rate_limit_tpm: Type.Optional(Tpm),
  max_concurrency: Type.Optional(Concurrency),
};

/** Limit fields of a view. */
export const LimitView = { rate_limit_rpm: Type.Integer(), rate_limit_tpm: Type.Integer(), max_concurrency: Type.Integer() };

/** The storage columns of limit fields present in `input`. */
export function limitPatch(input: { rate_limit_rpm?: number; rate_limit_tpm?: number; max_concurrency?: number }): { rateLimitRpm?: number; rateLimitTpm?: number; maxConcurrency?: number } {
  const out: { rateLimitRpm?: number; rateLimitTpm?: number; maxConcurrency?: number } = {};
  if (input.rate_limit_rpm !== undefined) out.rateLimitRpm = input.rate_limit_rpm;
  if (input.rate_limit_tpm !== undefined) out.rateLimitTpm = input.rate_limit_tpm;
  if (input.max_concurrency !== undefined) out.maxConcurrency = input.max_concurrency;
  return out;
}

/** Limit columns as view fields. */
export const limitView = (r: { rateLimitRpm: number; rateLimitTpm: number; maxConcurrency: number }) =>
  ({ rate_limit_rpm: r.rateLimitRpm, rate_limit_tpm: r.rateLimitTpm, max_concurrency: r.maxConcurrency });
