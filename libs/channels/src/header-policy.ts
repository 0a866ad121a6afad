/**
 * A channel's header policy: which of the client's headers and billing-relevant body fields reach its
 * upstream. One function applies it for every upstream call (messages, count_tokens), whatever the
 * adapter; adapters only place what it lets through.
 *
 * Defaults (an empty policy): `anthropic-beta` is forwarded as sent (the native adapter sends it, the
 * OpenAI ones ignore it), no other client header is forwarded, and `service_tier` / `speed` / `inference_geo`
 * are removed from the body (they select a pricier service level the gateway's prices do not cover).
 */
import { GatewayError } from '@gw/core';
import type { HeaderPolicy } from '@gw/db';
import { Type, type Static } from '@sinclair/typebox';
import { FORBIDDEN_HEADERS } from './validate';

const Name = Type.String({ minLength: 1, maxLength: 128 });

/** The API shape of a header policy (every field optional on input; the view shows every field). */
export const HeaderPolicySchema = Type.Object({
  forward_headers: Type.Optional(Type.Array(Name, { maxItems: 50, description: 'Client headers forwarded as sent (e.g. user-agent, x-app). Default none. Not hop-by-hop, credential or protocol headers (anthropic-version, anthropic-beta, content-type).' })),
  beta_strip: Type.Optional(Type.Array(Name, { maxItems: 100, description: 'anthropic-beta values removed before forwarding; "*" removes the header.' })),
  beta_rewrite: Type.Optional(Type.Record(Name, Name, { description: 'anthropic-beta values renamed before forwarding (from → to).' })),
  allow_service_tier: Type.Optional(Type.Boolean({ description: 'Forward the body fields service_tier, speed and inference_geo (default false: removed).' })),
}, { description: 'Which client headers and billing-relevant body fields reach the upstream. PUT replaces the whole policy.' });
export type HeaderPolicyInput = Static<typeof HeaderPolicySchema>;

/** A policy with every field present, as stored and shown. */
export type FullHeaderPolicy = Required<HeaderPolicy>;

/** Headers the policy itself owns or the adapter sets: never forwarded by name. */
const OWNED = new Set(['anthropic-beta', 'anthropic-version', 'content-type', 'accept-encoding', 'openai-beta', 'origin']);
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const BETA = /^[A-Za-z0-9._-]+$/;
/**
 * Body fields that choose a pricier service level: Anthropic's priority tier, fast mode, and US-only inference
 * (`inference_geo: "us"`, 1.1× every token price on Opus 4.6 and later).
 */
const TIER_FIELDS = ['service_tier', 'speed', 'inference_geo'] as const;

const invalid = (param: string, message: string) => new GatewayError(400, 'invalid_value', message, { param });

/** Fills defaults, lower-cases header names, de-duplicates, and refuses names or values it cannot apply. */
export function normalizeHeaderPolicy(p: HeaderPolicyInput | HeaderPolicy | undefined | null): FullHeaderPolicy {
  const forward = [...new Set((p?.forward_headers ?? []).map((n, i) => {
    const lower = n.trim().toLowerCase();
    const param = `header_policy.forward_headers[${i}]`;
    if (!TOKEN.test(lower)) throw invalid(param, `header_policy.forward_headers: "${n}" is not a valid header name`);
    if (FORBIDDEN_HEADERS.has(lower) || OWNED.has(lower)) throw invalid(param, `header_policy.forward_headers: "${n}" cannot be forwarded (hop-by-hop, credential or protocol header)`);
    return lower;
  }))];
  const strip = [...new Set((p?.beta_strip ?? []).map((b, i) => {
    const v = b.trim();
    if (v !== '*' && !BETA.test(v)) throw invalid(`header_policy.beta_strip[${i}]`, `header_policy.beta_strip: "${b}" is not a beta name (letters, digits, . _ -) or "*"`);
    return v;
  }))];
  const rewrite: Record<string, string> = {};
  for (const [from, to] of Object.entries(p?.beta_rewrite ?? {})) {
    if (!BETA.test(from.trim()) || typeof to !== 'string' || !BETA.test(to.trim())) {
      throw invalid(`header_policy.beta_rewrite.${from}`, 'header_policy.beta_rewrite: keys and values must be beta names (letters, digits, . _ -)');
    }
    rewrite[from.trim()] = to.trim();
  }
  if (Object.keys(rewrite).length > 100) throw invalid('header_policy.beta_rewrite', 'header_policy.beta_rewrite: at most 100 entries');
  return { forward_headers: forward, beta_strip: strip, beta_rewrite: rewrite, allow_service_tier: p?.allow_service_tier === true };
}

/** What reaches the upstream of the client's headers: `clientHeaders` for the adapter (only `anthropic-beta`), `forwarded` as sent. */
export interface ForwardedHeaders {
  clientHeaders: Headers;
  forwarded: Record<string, string>;
}

/** Applies the header part of `policy` to the client's headers. */
export function applyHeaderPolicy(policy: HeaderPolicy, client: Headers): ForwardedHeaders {
  const forwarded: Record<string, string> = {};
  for (const name of policy.forward_headers ?? []) {
    const v = client.get(name);
    if (v !== null) forwarded[name] = v;
  }
  const clientHeaders = new Headers();
  const beta = rewriteBetas(client.get('anthropic-beta'), policy);
  if (beta) clientHeaders.set('anthropic-beta', beta);
  return { clientHeaders, forwarded };
}

/** `anthropic-beta` (comma separated; repeated headers arrive joined) after strip and rewrite; '' = none left. */
export function rewriteBetas(header: string | null, policy: HeaderPolicy): string {
  if (!header) return '';
  const strip = new Set(policy.beta_strip ?? []);
  if (strip.has('*')) return '';
  const rewrite = policy.beta_rewrite ?? {};
  const out: string[] = [];
  for (const raw of header.split(',')) {
    const b = raw.trim();
    if (!b || strip.has(b)) continue;
    const v = Object.hasOwn(rewrite, b) ? rewrite[b]! : b;
    if (!out.includes(v)) out.push(v);
  }
  return out.join(',');
}

/** The body without the service-level fields unless the policy allows them (a copy; `body` is not changed). */
export function applyBodyPolicy<T extends object>(policy: HeaderPolicy, body: T): T {
  if (policy.allow_service_tier === true || !TIER_FIELDS.some((f) => f in body)) return body;
  const copy = { ...body } as Record<string, unknown>;
  for (const f of TIER_FIELDS) delete copy[f];
  return copy as T;
}
