/**
 * Per-channel parameter and header overrides: their API shape and the checks that run once, when a
 * channel is created or updated (400 naming the entry). The compiled form the relay runs is in
 * override-program.ts.
 *
 * What an override may not touch, and why:
 * - body `model` (model_mapping owns it), `messages` (the conversation is the client's), `stream` (the
 *   relay must answer in the format the client asked for), `service_tier` / `speed` / `inference_geo` (they
 *   select a pricier service level; header_policy.allow_service_tier decides them), and a field the API requires
 *   (`max_tokens`, `thinking.type`, ... may be set or clamped, never removed);
 * - hop-by-hop, framing and credential headers (the channel's key owns authentication), and the protocol
 *   headers the gateway or header_policy own (`anthropic-version`, `anthropic-beta`, `content-type`, ...):
 *   a beta such as `context-1m-*` changes what a request may cost, and the reservation reads the beta
 *   header the client sent. set_header also refuses credential-looking names and values: overrides are
 *   shown unmasked (put secrets in `headers`, which are masked and scrubbed).
 */
import { GatewayError } from '@gw/core';
import type { ChannelOverride } from '@gw/db';
import { MessagesRequestSchema } from '@gw/formats';
import { isCredentialHeader } from '@gw/providers';
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { FORBIDDEN_HEADERS } from './validate';

export const OVERRIDE_OPS = ['set', 'remove', 'clamp', 'set_header', 'remove_header'] as const;
export type OverrideOp = (typeof OVERRIDE_OPS)[number];

/** Most entries per channel, and the largest `value` of one set (as JSON). */
export const MAX_OVERRIDES = 50;
export const MAX_OVERRIDE_VALUE_BYTES = 16 * 1024;

export const OverrideSchema = Type.Object({
  op: Type.Union([Type.Literal('set'), Type.Literal('remove'), Type.Literal('clamp'), Type.Literal('set_header'), Type.Literal('remove_header')], {
    description: 'set (a body field to `value`), remove (a body field), clamp (a numeric body field into [min, max]), set_header, remove_header',
    error: 'must be one of set, remove, clamp, set_header, remove_header',
  }),
  path: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'set/remove/clamp: the Anthropic request field, top-level (`max_tokens`) or a dot path (`thinking.budget_tokens`)' })),
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 128, description: 'set_header/remove_header: the upstream header' })),
  value: Type.Optional(Type.Unknown({ description: 'set: any JSON value (checked against the field when the gateway knows it); set_header: a string' })),
  min: Type.Optional(Type.Number({ description: 'clamp: lower bound' })),
  max: Type.Optional(Type.Number({ description: 'clamp: upper bound' })),
  models: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 200 }), {
    minItems: 1, maxItems: 100, description: 'Only for these models (the requested or the upstream name): exact names or a prefix ending in `*`. Absent: every model',
  })),
  // Open so that normalizeOverrides sees (and refuses) unknown keys: Elysia would silently strip them, and a
  // misspelt `models` dropped that way would widen an entry to every model.
}, { additionalProperties: true, description: 'One override' });
export type OverrideInput = Static<typeof OverrideSchema>;

export const OverridesSchema = Type.Array(OverrideSchema, {
  maxItems: MAX_OVERRIDES,
  description: 'Parameter and header overrides applied in order to every request of the channel after validation and before the adapter (native and translated upstreams alike). PUT replaces the list.',
});

export const BillingModelSchema = Type.Union([Type.Literal('requested'), Type.Literal('upstream')], {
  description: "Which model's price bills the channel's requests: 'requested' (default: the model the client asked for) or 'upstream' (the model_mapping target; its price, else the requested model's)",
  error: "must be 'requested' or 'upstream'",
});

/** Body fields no override may touch (see the file comment). */
const REFUSED_FIELDS: Record<string, string> = {
  model: 'use model_mapping to change the upstream model',
  messages: 'the conversation is the client\'s',
  stream: 'the relay must answer in the format the client asked for',
  service_tier: 'it selects a pricier service level; header_policy.allow_service_tier decides it',
  speed: 'it selects a pricier service level; header_policy.allow_service_tier decides it',
  inference_geo: 'it selects a pricier service level; header_policy.allow_service_tier decides it',
};
/** Protocol headers the adapter or header_policy set (besides FORBIDDEN_HEADERS). */
const OWNED_HEADERS = new Set(['anthropic-version', 'anthropic-beta', 'content-type', 'content-encoding', 'accept-encoding', 'openai-beta', 'origin', 'expect']);
const SEGMENT = /^[A-Za-z0-9_-]+$/;
const UNSAFE_SEGMENTS = new Set(['__proto__', 'constructor', 'prototype']);
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const KNOWN_KEYS = new Set(['op', 'path', 'name', 'value', 'min', 'max', 'models']);
const FIELDS_OF: Record<OverrideOp, string[]> = {
  set: ['path', 'value'], remove: ['path'], clamp: ['path', 'min', 'max'], set_header: ['name', 'value'], remove_header: ['name'],
};

const invalid = (param: string, message: string) => new GatewayError(400, 'invalid_value', message, { param });

/** Checks every entry and returns the stored form (header names lower-cased, only the fields of each op). */
export function normalizeOverrides(list: OverrideInput[] | ChannelOverride[] | undefined | null): ChannelOverride[] {
  if (!list) return [];
  if (list.length > MAX_OVERRIDES) throw invalid('overrides', `overrides: at most ${MAX_OVERRIDES} entries`);
  return list.map((e, i) => normalizeOne(e as OverrideInput, `overrides[${i}]`));
}

function normalizeOne(e: OverrideInput, at: string): ChannelOverride {
  const op = e.op;
  for (const k of Object.keys(e)) {
    if (!KNOWN_KEYS.has(k)) throw invalid(`${at}.${k}`, `${at}: unknown field "${k}" (an override has op, path, name, value, min, max, models)`);
  }
  if (!OVERRIDE_OPS.includes(op)) throw invalid(`${at}.op`, `${at}.op must be one of ${OVERRIDE_OPS.join(', ')}`);
  for (const k of ['path', 'name', 'value', 'min', 'max'] as const) {
    if (e[k] !== undefined && !FIELDS_OF[op].includes(k)) throw invalid(`${at}.${k}`, `${at}: ${k} does not apply to ${op} (it takes ${FIELDS_OF[op].join(', ')})`);
  }
  const out: ChannelOverride = { op };
  if (op === 'set_header' || op === 'remove_header') {
    out.name = headerName(e, op, at);
    if (op === 'set_header') out.value = e.value;
  }
  else Object.assign(out, bodyOp(e, op, at));
  if (e.models !== undefined) out.models = modelPatterns(e.models, `${at}.models`);
  return out;
}

function headerName(e: OverrideInput, op: OverrideOp, at: string): string {
  if (e.name === undefined) throw invalid(`${at}.name`, `${at}: ${op} needs a header name`);
  const name = e.name.trim().toLowerCase();
  if (!TOKEN.test(name)) throw invalid(`${at}.name`, `${at}.name: "${e.name}" is not a valid header name`);
  if (FORBIDDEN_HEADERS.has(name)) throw invalid(`${at}.name`, `${at}.name: "${name}" cannot be overridden (hop-by-hop, framing or credential header; the channel's key authenticates it)`);
  if (OWNED_HEADERS.has(name)) throw invalid(`${at}.name`, `${at}.name: "${name}" cannot be overridden (protocol header set by the adapter or by header_policy)`);
  if (op === 'set_header') {
    if (typeof e.value !== 'string') throw invalid(`${at}.value`, `${at}: set_header needs a string value`);
    if (e.value.length > 4096 || /[\r\n\0]/.test(e.value)) throw invalid(`${at}.value`, `${at}.value: at most 4096 characters, no line breaks`);
    if (isCredentialHeader(name, e.value)) {
      throw invalid(`${at}.name`, `${at}: "${name}" looks like a credential; overrides are shown unmasked, so set it in the channel's headers (masked on read) instead`);
    }
  }
  return name;
}

function bodyOp(e: OverrideInput, op: OverrideOp, at: string): Partial<ChannelOverride> {
  if (e.path === undefined) throw invalid(`${at}.path`, `${at}: ${op} needs a path`);
  const path = e.path.trim();
  const segs = path.split('.');
  if (segs.length > 4 || segs.some((s) => !SEGMENT.test(s) || UNSAFE_SEGMENTS.has(s))) {
    throw invalid(`${at}.path`, `${at}.path: "${e.path}" is not a field path (1 to 4 names of letters, digits, _ or -, joined by dots)`);
  }
  const why = REFUSED_FIELDS[segs[0]!];
  if (why) throw invalid(`${at}.path`, `${at}.path: "${segs[0]}" cannot be overridden (${why})`);
  const f = fieldSchema(segs, at);
  if (op === 'remove') {
    if (f.required) throw invalid(`${at}.path`, `${at}: "${path}" is required by the Messages API and cannot be removed (set or clamp it instead)`);
    return { path };
  }
  if (op === 'set') {
    if (!('value' in e) || e.value === undefined) throw invalid(`${at}.value`, `${at}: set needs a value`);
    if (JSON.stringify(e.value).length > MAX_OVERRIDE_VALUE_BYTES) throw invalid(`${at}.value`, `${at}.value: at most ${MAX_OVERRIDE_VALUE_BYTES} bytes of JSON`);
    if (f.schema && !Value.Check(f.schema, e.value)) throw invalid(`${at}.value`, `${at}.value does not fit ${path}: ${firstError(f.schema, e.value)}`);
    return { path, value: e.value };
  }
  // clamp
  if (e.min === undefined && e.max === undefined) throw invalid(`${at}`, `${at}: clamp needs min, max or both`);
  if (e.min !== undefined && e.max !== undefined && e.min > e.max) throw invalid(`${at}.min`, `${at}: min (${e.min}) is above max (${e.max})`);
  if (f.schema) {
    if (f.schema.type !== 'number' && f.schema.type !== 'integer') throw invalid(`${at}.path`, `${at}: "${path}" is not a number; clamp applies to numeric fields`);
    for (const k of ['min', 'max'] as const) {
      if (e[k] !== undefined && !Value.Check(f.schema, e[k])) throw invalid(`${at}.${k}`, `${at}.${k} does not fit ${path}: ${firstError(f.schema, e[k])}`);
    }
  }
  return { path, ...(e.min !== undefined ? { min: e.min } : {}), ...(e.max !== undefined ? { max: e.max } : {}) };
}

/** The schema of a request field the gateway knows (undefined: any JSON), and whether its object requires it. */
function fieldSchema(segs: string[], at: string): { schema?: TSchema; required: boolean } {
  let s: TSchema | undefined = MessagesRequestSchema;
  let required = false;
  for (const [i, seg] of segs.entries()) {
    if (!s) return { required: false };
    if (s.type !== 'object' || !s.properties) {
      // A union (e.g. system: string | blocks) or an open value: nothing more is known below it.
      if (s.type === undefined || s.anyOf) return { required: false };
      throw invalid(`${at}.path`, `${at}.path: "${segs.slice(0, i).join('.')}" is not an object`);
    }
    required = Array.isArray(s.required) && s.required.includes(seg);
    s = (s.properties as Record<string, TSchema>)[seg];
  }
  // Type.Unknown (no type, no union) checks nothing: treat it as an unknown field.
  return { schema: s && (s.type !== undefined || s.anyOf) ? s : undefined, required };
}

function firstError(schema: TSchema, v: unknown): string {
  return Value.Errors(schema, v).First()?.message ?? 'invalid value';
}

function modelPatterns(models: string[], at: string): string[] {
  const out = [...new Set(models.map((m) => m.trim()))];
  for (const [i, m] of out.entries()) {
    if (!m) throw invalid(`${at}[${i}]`, `${at}: names must not be blank`);
    const star = m.indexOf('*');
    if (star !== -1 && star !== m.length - 1) throw invalid(`${at}[${i}]`, `${at}: "${m}": * may only end a name (a prefix pattern such as claude-3-*)`);
  }
  return out;
}
