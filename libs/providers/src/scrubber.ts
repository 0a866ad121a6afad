/**
 * The one scrubber for upstream-derived text (error messages, stream errors, test results, log lines).
 * It removes the channel's own credentials (the key, and credential-looking extra header values) and every
 * substring of them of at least MIN_FRAGMENT characters, whatever the key's format, with key characters glued
 * after them, then URLs and common key shapes, and caps the length. Prefix patterns alone let other key formats and key tails through.
 */

/** Fragments of a secret at least this long are removed (shorter ones are too common to be telling). */
export const MIN_FRAGMENT = 8;
/** Longest text a scrubbed message keeps. */
export const MAX_SCRUBBED = 400;
const REDACTED = '[redacted]';

const CREDENTIAL_NAME = /auth|key|token|secret|passw|cookie|signature|credential|session/i;

/** A value that looks like a random token: long, no spaces, mixes character classes. */
export function looksRandom(value: string): boolean {
  if (value.length < 20 || !/^[A-Za-z0-9_\-+/=.~:]+$/.test(value)) return false;
  const classes = Number(/[a-z]/.test(value)) + Number(/[A-Z]/.test(value)) + Number(/\d/.test(value));
  return classes >= 3 || (classes === 2 && value.length >= 32);
}

/** True when a channel's extra header probably carries a credential (masked on read, scrubbed from text). */
export function isCredentialHeader(name: string, value: string): boolean {
  return CREDENTIAL_NAME.test(name) || looksRandom(value);
}

/**
 * The secrets of a channel: its keys and its credential-looking header values, those sent (`extraHeaders`, after a
 * model's overrides) and the channel's own (`channelHeaders`): a value a model's override removed or replaced was
 * not sent for that model, but the upstream may still know and echo it.
 */
export function channelSecrets(c: { apiKey: string; extraHeaders?: Record<string, string>; channelHeaders?: Record<string, string>; keys?: string[] }): string[] {
  // Every key of the channel, not only the one in use: an upstream may echo a sibling key (shared accounts).
  const out = [c.apiKey, ...(c.keys ?? [])];
  for (const h of [c.extraHeaders, c.channelHeaders]) {
    for (const [name, value] of Object.entries(h ?? {})) if (isCredentialHeader(name, value)) out.push(value);
  }
  return [...new Set(out.filter((s) => s.length >= 6))];
}

/**
 * The forms in which an upstream may echo a secret: as is, percent-encoded, and base64 (standard and URL
 * alphabets) at each of the three byte alignments it can have inside a longer encoded value (Basic auth
 * encodes `user:key`). A base64 form keeps only the characters that depend on the secret alone, so any
 * MIN_FRAGMENT of them found in a text is a piece of the secret.
 */
export function secretForms(secret: string): string[] {
  const forms = new Set([secret, encodeURIComponent(secret)]);
  const bytes = Buffer.from(secret);
  for (let pad = 0; pad < 3; pad++) {
    const enc = Buffer.concat([Buffer.alloc(pad), bytes]).toString('base64');
    // The first group mixes in the padding bytes, the last may mix in whatever follows the secret.
    const core = enc.slice(pad ? 4 : 0, Math.floor((pad + bytes.length) / 3) * 4);
    if (core.length >= MIN_FRAGMENT) forms.add(core).add(core.replace(/\+/g, '-').replace(/\//g, '_'));
  }
  return [...forms];
}

/** A removal with the key characters glued after it (before it, they are often a label: `bad_key_<key>`). */
const GLUED = /\[redacted\][A-Za-z0-9_\-+/=~*]+/g;

/** Generic patterns: URLs, `sk-…`-like keys, Bearer values. */
function scrubPatterns(text: string): string {
  return text
    .replace(/\b(?:https?|wss?):\/\/\S+/gi, '[url]')
    .replace(/\b(?:sk|rk|pk|ak|gsk|key|api)[-_][A-Za-z0-9_\-*]{6,}/gi, REDACTED)
    .replace(/\bBearer\s+\S+/gi, `Bearer ${REDACTED}`);
}

/**
 * The words of a channel's address an upstream may write bare (not as a URL, which the patterns remove): host:port,
 * host (one of a single label only from MIN_FRAGMENT characters), and path segments of MIN_FRAGMENT characters or
 * more other than plain lower-case words (some gateways put an account id there). Proxies and self-hosted servers
 * name where they run in their errors ("not loaded on 10.0.4.17:8000"), and a client must not learn the operator's
 * internal hosts from a relayed 400.
 * Longest first, so host:port goes before its host.
 */
export function addressWords(baseUrl: string | undefined): string[] {
  if (!baseUrl) return [];
  let u: URL;
  try {
    u = new URL(baseUrl);
  } catch {
    return [];
  }
  const hostname = u.hostname.replace(/^\[|\]$/g, '');
  // A one-label name under MIN_FRAGMENT characters (a compose service: `api`, `model`, `litellm`) is a word of every
  // error, removed in any case it made "Invalid API key" read "Invalid [redacted] key"; it routes nowhere outside.
  const bare = /[.:]/.test(hostname) || hostname.length >= MIN_FRAGMENT;
  const words = new Set(bare ? [u.host, hostname] : u.port ? [u.host] : []);
  for (const seg of u.pathname.split('/')) {
    // A plain lower-case word is the provider's vocabulary, not the operator's (`/anthropic`, `/openai/deployments`,
    // `/inference`): removed, "The Anthropic API" read "The [redacted] API". Ids and names have digits, dashes or capitals.
    if (seg.length < MIN_FRAGMENT || PLAIN_WORD.test(seg)) continue;
    words.add(seg);
    try { words.add(decodeURIComponent(seg)); } catch { /* kept as written */ }
  }
  return [...words].filter(Boolean).sort((a, b) => b.length - a.length);
}

const PLAIN_WORD = /^[a-z]+$/;

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

export class Scrubber {
  /** The channel's address words (addressWords), whole and in any case; null without any. */
  private readonly address: RegExp | null;
  /** Every MIN_FRAGMENT-long piece of every secret → where it occurs ([secret index, offset]). */
  private readonly grams = new Map<string, Array<[number, number]>>();
  /** Secrets shorter than MIN_FRAGMENT, removed only whole. */
  private readonly short: string[] = [];

  /** Every form of every secret (secretForms). */
  private readonly secrets: readonly string[];

  constructor(secrets: readonly string[] = [], address: readonly string[] = []) {
    // Whole words only: a host's name inside a longer one (`10.0.0.1` in `10.0.0.12`) is another host.
    this.address = address.length ? new RegExp(`(?<![A-Za-z0-9-])(?:${address.map(escapeRe).join('|')})(?![A-Za-z0-9-])`, 'gi') : null;
    this.secrets = secrets.flatMap((s) => (s.length < MIN_FRAGMENT ? [s] : secretForms(s)));
    this.secrets.forEach((s, si) => {
      if (s.length < MIN_FRAGMENT) {
        this.short.push(s);
        return;
      }
      for (let p = 0; p + MIN_FRAGMENT <= s.length; p++) {
        const g = s.slice(p, p + MIN_FRAGMENT);
        const list = this.grams.get(g);
        if (list) list.push([si, p]);
        else this.grams.set(g, [[si, p]]);
      }
    });
  }

  /** Text safe to show: secrets and their fragments removed, then patterns, then capped at `max`. */
  scrub(text: string, max = MAX_SCRUBBED): string {
    // Bounded work whatever the input: look at a little more than what will be kept.
    let t = text.length > max * 4 ? text.slice(0, max * 4) : text;
    t = this.removeSecrets(t);
    for (const s of this.short) t = t.split(s).join(REDACTED);
    if (this.address) t = t.replace(this.address, REDACTED);
    // Key characters glued after a removal go with it: another key sharing the channel key's prefix (`sk-proj-`, a
    // fragment of the channel's key) lost that prefix here and kept a tail no pattern knows. Run after the secrets,
    // not before them: a pattern stopping inside the channel's key (at a `.`) left a remnant under 8 characters
    // that no fragment search finds.
    t = scrubPatterns(t.replace(GLUED, REDACTED)).replace(/(?:\[redacted\]){2,}/g, REDACTED);
    return t.length > max ? t.slice(0, max) : t;
  }

  private removeSecrets(text: string): string {
    if (!this.grams.size) return text;
    const marks: Array<[number, number]> = [];
    for (let i = 0; i + MIN_FRAGMENT <= text.length; i++) {
      const hits = this.grams.get(text.slice(i, i + MIN_FRAGMENT));
      if (!hits) continue;
      let end = i + MIN_FRAGMENT;
      for (const [si, p] of hits) {
        const s = this.secrets[si]!;
        let k = MIN_FRAGMENT;
        while (i + k < text.length && p + k < s.length && text.charCodeAt(i + k) === s.charCodeAt(p + k)) k++;
        end = Math.max(end, i + k);
      }
      const last = marks.at(-1);
      if (last && i <= last[1]) last[1] = Math.max(last[1], end);
      else marks.push([i, end]);
    }
    if (!marks.length) return text;
    let out = '';
    let at = 0;
    for (const [s, e] of marks) {
      out += text.slice(at, s) + REDACTED;
      at = e;
    }
    return out + text.slice(at);
  }
}

/** The scrubber without channel secrets (patterns and the length cap only). */
export const genericScrubber = new Scrubber();

/** The scrubber of one channel's upstream text: its secrets, and its address written bare (`baseUrl`). */
export function scrubberFor(c: { apiKey: string; extraHeaders?: Record<string, string>; channelHeaders?: Record<string, string>; keys?: string[]; baseUrl?: string }): Scrubber {
  return new Scrubber(channelSecrets(c), addressWords(c.baseUrl));
}
