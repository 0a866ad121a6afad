/**
 * The request limits a key, a user or a group may carry (0 = unlimited), as one set of API fields so
 * the three records validate and show them identically. `model_limits` adds the same three limits per
 * model pattern (an exact model name, or a prefix ending in `*`), counted apart from the general ones.
 */
import { Type } from '@sinclair/typebox';
import type { ModelLimitMap } from '@gw/db';

export const Rpm = Type.Integer({ minimum: 0, maximum: 1_000_000, description: 'Requests per minute; 0 = unlimited' });
export const Tpm = Type.Integer({ minimum: 0, maximum: 1e12, description: 'Tokens per minute (input bound + max_tokens, counted at admission); 0 = unlimited' });
export const Concurrency = Type.Integer({ minimum: 0, maximum: 100_000, description: 'Requests in flight at once; 0 = unlimited' });

/** A model name, or a prefix followed by one trailing `*` (`claude-opus-*`, `*` = every model). */
export const MODEL_PATTERN = '^[^*\\s]{0,199}\\*?$';
export const MAX_MODEL_LIMITS = 32;

const ModelLimit = Type.Object({
  rate_limit_rpm: Type.Optional(Rpm),
  rate_limit_tpm: Type.Optional(Tpm),
  max_concurrency: Type.Optional(Concurrency),
}, {
  additionalProperties: false,
  // Unknown fields are stripped before validation: an entry left empty was a typo, not "no limits".
  minProperties: 1, error: 'must set rate_limit_rpm, rate_limit_tpm and/or max_concurrency (integers ≥ 0)',
});

/** Per-model limits of a create/update body; null or {} clears them. */
export const ModelLimitsInput = Type.Union([
  Type.Record(Type.String({ pattern: MODEL_PATTERN }), ModelLimit, {
    maxProperties: MAX_MODEL_LIMITS, additionalProperties: false,
    description: 'Limits per model: keys are a model name or a prefix ending in `*`; the most specific pattern (exact, else longest prefix) applies, counted per pattern',
  }),
  Type.Null(),
]);

/** Optional limit fields of a create/update body. */
export const LimitInput = {
  rate_limit_rpm: Type.Optional(Rpm),
  rate_limit_tpm: Type.Optional(Tpm),
  max_concurrency: Type.Optional(Concurrency),
  model_limits: Type.Optional(ModelLimitsInput),
};

const ModelLimitView = Type.Object({ rate_limit_rpm: Type.Integer(), rate_limit_tpm: Type.Integer(), max_concurrency: Type.Integer() });

/** Limit fields of a view. */
export const LimitView = {
  rate_limit_rpm: Type.Integer(), rate_limit_tpm: Type.Integer(), max_concurrency: Type.Integer(),
  model_limits: Type.Union([Type.Record(Type.String(), ModelLimitView), Type.Null()]),
};

/** Per-model limits as stored (JSON column): pattern → limits; null = none. */
export type StoredModelLimits = ModelLimitMap;
/** The three limits as stored and read on the request path (0 = unlimited). */
export type StoredLimits = ModelLimitMap[string];

type ModelLimitInput = { rate_limit_rpm?: number; rate_limit_tpm?: number; max_concurrency?: number };
type LimitInputFields = ModelLimitInput & { model_limits?: Record<string, ModelLimitInput> | null };

/** API per-model limits as stored; `Object.fromEntries` so a pattern named `__proto__` stays a plain key. */
export function storedModelLimits(input: Record<string, ModelLimitInput> | null): StoredModelLimits | null {
  const entries = Object.entries(input ?? {});
  if (!entries.length) return null;
  return Object.fromEntries(entries.map(([p, l]) => [p, { rateLimitRpm: l.rate_limit_rpm ?? 0, rateLimitTpm: l.rate_limit_tpm ?? 0, maxConcurrency: l.max_concurrency ?? 0 }]));
}

/** The storage columns of limit fields present in `input`. */
export function limitPatch(input: LimitInputFields): Partial<StoredLimits> & { modelLimits?: StoredModelLimits | null } {
  const out: Partial<StoredLimits> & { modelLimits?: StoredModelLimits | null } = {};
  if (input.rate_limit_rpm !== undefined) out.rateLimitRpm = input.rate_limit_rpm;
  if (input.rate_limit_tpm !== undefined) out.rateLimitTpm = input.rate_limit_tpm;
  if (input.max_concurrency !== undefined) out.maxConcurrency = input.max_concurrency;
  if (input.model_limits !== undefined) out.modelLimits = storedModelLimits(input.model_limits);
  return out;
}

const oneView = (l: StoredLimits) => ({ rate_limit_rpm: l.rateLimitRpm, rate_limit_tpm: l.rateLimitTpm, max_concurrency: l.maxConcurrency });

/** Limit columns as view fields. */
export const limitView = (r: StoredLimits & { modelLimits?: StoredModelLimits | null }) => ({
  ...oneView(r),
  model_limits: r.modelLimits ? Object.fromEntries(Object.entries(r.modelLimits).map(([p, l]) => [p, oneView(l)])) : null,
});
