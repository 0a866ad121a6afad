/** Semantic checks of channel fields that a JSON schema cannot express; each names its field. */
import { GatewayError } from '@gw/core';

const invalid = (param: string, message: string) => new GatewayError(400, 'invalid_value', message, { param });

/**
 * Normalises an upstream base URL: http(s) only, no credentials, query or fragment, no trailing
 * slash, and no trailing `/v1` (the adapter appends `/v1/...`; a doubled `/v1/v1` is the most common
 * misconfiguration). A path prefix such as `https://proxy.example/api` is kept.
 */
export function normalizeBaseUrl(raw: string): string {
  let u: URL;
  try {
    u = new URL(raw.trim());
  } catch {
    throw invalid('base_url', `base_url is not a valid URL: "${raw}"`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw invalid('base_url', 'base_url must start with http:// or https://');
  if (u.username || u.password) throw invalid('base_url', 'base_url must not contain credentials; put the key in `key`');
  if (u.search || u.hash) throw invalid('base_url', 'base_url must not have a query string or fragment');
  const path = u.pathname.replace(/\/+$/, '');
  if (/\/v1$/i.test(path)) {
    throw invalid('base_url', 'base_url must be the upstream origin without /v1 (e.g. https://api.openai.com); the gateway appends /v1/... itself');
  }
  return `${u.protocol}//${u.host}${path}`;
}

/** Headers a channel may not set: hop-by-hop (RFC 9110 §7.6.1), framing, and credentials (the key field owns those). */
export const FORBIDDEN_HEADERS = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'trailers', 'transfer-encoding', 'upgrade',
  'host', 'content-length', 'authorization', 'proxy-authorization', 'proxy-authenticate', 'x-api-key', 'api-key', 'cookie',
]);
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** Lower-cases header names and refuses invalid, duplicate, hop-by-hop or credential headers. */
export function normalizeHeaders(h: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  const entries = Object.entries(h);
  if (entries.length > 50) throw invalid('headers', 'headers: at most 50 extra headers');
  for (const [name, value] of entries) {
    const lower = name.trim().toLowerCase();
    if (!TOKEN.test(lower)) throw invalid(`headers.${name}`, `headers: "${name}" is not a valid header name`);
    if (FORBIDDEN_HEADERS.has(lower)) {
      throw invalid(`headers.${name}`, `headers: "${name}" cannot be set on a channel (hop-by-hop or credential header; the key goes in \`key\`)`);
    }
    if (lower in out) throw invalid(`headers.${name}`, `headers: "${name}" is given twice`);
    if (typeof value !== 'string' || /[\r\n\0]/.test(value)) throw invalid(`headers.${name}`, `headers: value of "${name}" must be a string without line breaks`);
    out[lower] = value.trim();
  }
  return out;
}

/** Trims and de-duplicates model names; the list must stay non-empty. */
export function normalizeModels(models: string[]): string[] {
  const out = [...new Set(models.map((m) => m.trim()))];
  const blank = out.findIndex((m) => m === '');
  if (blank >= 0) throw invalid(`models[${models.findIndex((m) => m.trim() === '')}]`, 'models: names must not be blank');
  if (!out.length) throw invalid('models', 'models must list at least one model');
  return out;
}

/**
 * Trims a model mapping; keys and values must be non-blank. Entries are defined, not assigned, so that no key can
 * set the copy's prototype (an API body with a `__proto__` key is refused before it gets here: see jsonBodyIssue).
 */
export function normalizeMapping(m: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  const entries = Object.entries(m);
  if (entries.length > 1000) throw invalid('model_mapping', 'model_mapping: at most 1000 entries');
  for (const [from, to] of entries) {
    if (typeof to !== 'string' || !from.trim() || !to.trim()) throw invalid(`model_mapping.${from}`, 'model_mapping: keys and values must be non-blank model names');
    Object.defineProperty(out, from.trim(), { value: to.trim(), enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/** A non-blank trimmed name. */
export function normalizeName(name: string): string {
  const n = name.trim();
  if (!n) throw invalid('name', 'name must not be blank');
  return n;
}
