/**
 * IP allow-lists of relay API keys: single addresses and CIDR ranges, IPv4 and IPv6, with
 * IPv4-mapped IPv6 (`::ffff:1.2.3.4`, what a dual-stack socket reports) treated as IPv4.
 */
import { sha256Hex } from '@gw/core';

interface Addr { v: 4 | 6; n: bigint }
interface Range { v: 4 | 6; net: bigint; bits: number }

function parseV4(s: string): bigint | null {
  const parts = s.split('.');
  if (parts.length !== 4) return null;
  let n = 0n;
  for (const p of parts) {
    // No leading zeros: "010" is octal to some parsers and decimal to others.
    if (!/^(0|[1-9]\d{0,2})$/.test(p) || Number(p) > 255) return null;
    n = (n << 8n) | BigInt(p);
  }
  return n;
}

function parseV6(s: string): bigint | null {
  const str = s.replace(/%.*$/, '');
  if (!/^[0-9a-fA-F:.]+$/.test(str)) return null;
  const halves = str.split('::');
  if (halves.length > 2) return null;
  const groups = (h: string): number[] | null => {
    if (h === '') return [];
    const out: number[] = [];
    const parts = h.split(':');
    for (let i = 0; i < parts.length; i++) {
      const p = parts[i]!;
      if (i === parts.length - 1 && p.includes('.')) {
        const v4 = parseV4(p);
        if (v4 === null) return null;
        out.push(Number(v4 >> 16n), Number(v4 & 0xffffn));
      } else if (/^[0-9a-fA-F]{1,4}$/.test(p)) out.push(parseInt(p, 16));
      else return null;
    }
    return out;
  };
  const head = groups(halves[0]!);
  const tail = halves.length === 2 ? groups(halves[1]!) : [];
  if (!head || !tail) return null;
  const missing = 8 - head.length - tail.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return null;
  let n = 0n;
  for (const g of [...head, ...new Array(halves.length === 2 ? missing : 0).fill(0), ...tail]) n = (n << 16n) | BigInt(g);
  return n;
}

/** Parses an IPv4 or IPv6 address (brackets and zone ids allowed); IPv4-mapped IPv6 becomes IPv4. */
export function parseIp(raw: string): Addr | null {
  const s = raw.trim().replace(/^\[(.*)\]$/, '$1');
  const v4 = parseV4(s);
  if (v4 !== null) return { v: 4, n: v4 };
  const v6 = parseV6(s);
  if (v6 === null) return null;
  if (v6 >> 32n === 0xffffn) return { v: 4, n: v6 & 0xffffffffn };
  return { v: 6, n: v6 };
}

/**
 * The address an X-Forwarded-For entry names, or null when it names none. Proxies and load balancers write
 * `1.2.3.4:5678`, `[2001:db8::1]:443` or `[::1]`, some quote the entry (RFC 7239's style) or pad it: each is
 * the address alone, so a key's allow_ips and the per-address limits see one client, not one per port.
 */
export function forwardedAddress(entry: string): string | null {
  let s = entry.trim();
  if (s.length > 2 && s.startsWith('"') && s.endsWith('"')) s = s.slice(1, -1).trim();
  const bracketed = /^\[([^\]]*)\](?::(\d{1,5}))?$/.exec(s);
  if (bracketed) s = bracketed[1]!.trim();
  else {
    const v4Port = /^([\d.]+):\d{1,5}$/.exec(s);
    if (v4Port) s = v4Port[1]!;
  }
  // A zone id (`fe80::1%eth0`) names an interface of the proxy's own host, not a client, and parseIp ignores
  // it: kept, any text after a `%` would be recorded whole as the client's address.
  return !s.includes('%') && parseIp(s) ? s : null;
}

/** Longer than any written IPv6 address (45 characters, zone aside). */
const MAX_RAW_KEY = 64;
const HASHED = /^sha256:[0-9a-f]{64}$/;

/**
 * A client address as text short enough to keep: itself up to 64 characters, else `sha256:<hex>` of it (one
 * per text). Behind a trusted proxy that passes the client's X-Forwarded-For on, the "address" is whatever the
 * client wrote, up to a whole header (about 16 KB), and it is recorded in every usage row, session and log line
 * of that client. Idempotent: a value already in the hashed form is kept.
 */
export function boundedIpText(raw: string): string {
  return raw.length <= MAX_RAW_KEY || HASHED.test(raw) ? raw : `sha256:${sha256Hex(raw)}`;
}

/**
 * The key a per-address attempt limit (login, password reset) counts under: an IPv4 address (IPv4-mapped IPv6
 * included) as itself, an IPv6 address by its /64. One subscriber or host is usually given a whole /64, so
 * counting single IPv6 addresses let one client rotate through 2^64 of them, each with a fresh allowance.
 * Anything unparseable is its own key, by its SHA-256 when longer than an address can be: behind a trusted proxy
 * the client writes it, and kilobytes of it made a row PostgreSQL's index refuses (a 500) and a long-lived key
 * in every node's memory.
 */
export function attemptKeyOfIp(raw: string): string {
  const a = parseIp(raw);
  if (!a) return boundedIpText(raw);
  if (a.v === 4) return [24n, 16n, 8n, 0n].map((s) => Number((a.n >> s) & 0xffn)).join('.');
  const prefix = a.n >> 64n;
  return `${[48n, 32n, 16n, 0n].map((s) => ((prefix >> s) & 0xffffn).toString(16)).join(':')}::/64`;
}

/** Parses `addr` or `addr/bits`; host bits are masked off (10.1.2.3/8 = 10.0.0.0/8). */
export function parseRange(raw: string): Range | null {
  const [addr, bitsStr, extra] = raw.trim().split('/');
  if (extra !== undefined || !addr) return null;
  const s = addr.replace(/^\[(.*)\]$/, '$1');
  let v: 4 | 6;
  let n: bigint;
  const v4 = parseV4(s);
  if (v4 !== null) { v = 4; n = v4; } else {
    const v6 = parseV6(s);
    if (v6 === null) return null;
    v = 6; n = v6;
  }
  const max = v === 4 ? 32 : 128;
  let bits = max;
  if (bitsStr !== undefined) {
    if (!/^\d{1,3}$/.test(bitsStr) || Number(bitsStr) > max) return null;
    bits = Number(bitsStr);
  }
  // ::ffff:a.b.c.d/96+ is an IPv4 range written in IPv6.
  if (v === 6 && bits >= 96 && (n >> 32n) === 0xffffn) { v = 4; n &= 0xffffffffn; bits -= 96; }
  const width = BigInt(v === 4 ? 32 : 128);
  const mask = bits === 0 ? 0n : ((1n << BigInt(bits)) - 1n) << (width - BigInt(bits));
  return { v, net: n & mask, bits };
}

const rangeCache = new Map<string, Range | null>();
function cachedRange(s: string): Range | null {
  let r = rangeCache.get(s);
  if (r === undefined) {
    r = parseRange(s);
    if (rangeCache.size > 10_000) rangeCache.clear();
    rangeCache.set(s, r);
  }
  return r;
}

/** True when `ip` is inside one of `allowIps` (null or empty = any address). */
export function ipAllowed(allowIps: string[] | null, ip: string): boolean {
  if (!allowIps || allowIps.length === 0) return true;
  const a = parseIp(ip);
  if (!a) return false;
  for (const entry of allowIps) {
    const r = cachedRange(entry);
    if (!r || r.v !== a.v) continue;
    const width = BigInt(a.v === 4 ? 32 : 128);
    const mask = r.bits === 0 ? 0n : ((1n << BigInt(r.bits)) - 1n) << (width - BigInt(r.bits));
    if ((a.n & mask) === r.net) return true;
  }
  return false;
}

/** True when `s` is a valid IP address or CIDR range. */
export const isIpOrCidr = (s: string) => parseRange(s) !== null;
