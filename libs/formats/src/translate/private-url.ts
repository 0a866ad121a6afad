import { GatewayError } from '@gw/core';
import type { MessageParam } from '../anthropic/schema';

/**
 * Media URLs that point into the operator's own network. A translated upstream fetches an image URL itself, and a
 * self-hosted one runs inside that network: a client's `http://169.254.169.254/…` or `http://10.0.0.5/admin` would
 * be fetched from there (server-side request forgery). Only the URL's text is judged: a public name that resolves
 * to a private address cannot be told without DNS (and a later answer may differ), so only names that are never
 * public are refused: single-label ones (a Docker or Compose service, `redis`, `postgres`; EC2's `instance-data`),
 * `ip6-localhost` / `ip6-loopback`, and those under a suffix reserved or customary for private networks
 * (PRIVATE_SUFFIXES: `metadata.google.internal`, `printer.local`, `nas.home.arpa`).
 */

/** Name suffixes never delegated on the public internet: reserved (RFC 6761, 6762, 8375, ICANN's `.internal`) or kept out of the root for colliding with private use. */
const PRIVATE_SUFFIXES = ['localhost', 'local', 'localdomain', 'internal', 'home.arpa', 'lan', 'intranet', 'corp', 'home'];
const PRIVATE_NAMES = new Set(['ip6-localhost', 'ip6-loopback']);

/** IPv4 ranges that are never a public web server, as [first address, prefix length]. */
const PRIVATE_V4: ReadonlyArray<readonly [number, number]> = [
  [0x00000000, 8], // 0.0.0.0/8, "this network" (0.0.0.0 reaches the local host)
  [0x0a000000, 8], // 10/8
  [0x64400000, 10], // 100.64/10, carrier-grade NAT (shared, never public)
  [0x7f000000, 8], // loopback
  [0xa9fe0000, 16], // link-local, with the cloud metadata address 169.254.169.254
  [0xac100000, 12], // 172.16/12
  [0xc0000000, 24], // 192.0.0/24, IETF protocol assignments (Oracle Cloud's metadata address 192.0.0.192)
  [0xc0a80000, 16], // 192.168/16
  [0xc6120000, 15], // 198.18/15, benchmarking (used inside some networks)
  [0xe0000000, 4], // 224/4, multicast
  [0xf0000000, 4], // 240/4, reserved, with the broadcast address 255.255.255.255
];

function v4Private(n: number): boolean {
  return PRIVATE_V4.some(([base, bits]) => (n >>> (32 - bits)) === (base >>> (32 - bits)));
}

/** A dotted IPv4 address as the URL parser leaves it (it already turned `2130706433`, `0x7f.1`, `0177.0.0.1` into it). */
function parseV4(host: string): number | null {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(host);
  if (!m) return null;
  const parts = m.slice(1).map(Number);
  if (parts.some((p) => p > 255)) return null;
  return ((parts[0]! << 24) | (parts[1]! << 16) | (parts[2]! << 8) | parts[3]!) >>> 0;
}

/** The eight 16-bit groups of an IPv6 address (the parser's compressed, lower-case form), or null. */
function parseV6(host: string): number[] | null {
  let h = host;
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(h);
  if (v4) {
    const n = parseV4(v4[1]!);
    if (n === null) return null;
    h = `${h.slice(0, -v4[1]!.length)}${(n >>> 16).toString(16)}:${(n & 0xffff).toString(16)}`;
  }
  const [head, tail, extra] = h.split('::');
  if (extra !== undefined) return null;
  const groups = (s: string | undefined) => (s ? s.split(':').map((g) => parseInt(g, 16)) : []);
  const a = groups(head);
  const b = groups(tail);
  const fill = tail === undefined ? 0 : 8 - a.length - b.length;
  const all = [...a, ...new Array(Math.max(fill, 0)).fill(0), ...b];
  return all.length === 8 && all.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? all : null;
}

function v6Private(g: number[]): boolean {
  const embeddedV4 = ((g[6]! << 16) | g[7]!) >>> 0;
  const zeros = (n: number) => g.slice(0, n).every((x) => x === 0);
  if (zeros(8)) return true; // ::, the unspecified address
  if (zeros(7) && g[7] === 1) return true; // ::1
  if ((g[0]! & 0xfe00) === 0xfc00) return true; // fc00::/7, unique local
  if ((g[0]! & 0xffc0) === 0xfe80) return true; // fe80::/10, link-local
  if ((g[0]! & 0xffc0) === 0xfec0) return true; // fec0::/10, site-local (deprecated, still routed by some stacks)
  if ((g[0]! & 0xff00) === 0xff00) return true; // ff00::/8, multicast
  if (g[0] === 0x64 && g[1] === 0xff9b && g[2] === 1) return true; // 64:ff9b:1::/48, NAT64 for local use
  if (g[0] === 0x2002) return v4Private(((g[1]! << 16) | g[2]!) >>> 0); // 6to4 2002:a.b.c.d::/48, relayed to that IPv4 address
  if (zeros(5) && g[5] === 0xffff) return v4Private(embeddedV4); // IPv4-mapped ::ffff:a.b.c.d
  if (zeros(4) && g[4] === 0xffff && g[5] === 0) return v4Private(embeddedV4); // IPv4-translated ::ffff:0:a.b.c.d
  if (zeros(6)) return v4Private(embeddedV4); // IPv4-compatible ::a.b.c.d (deprecated, still routed by some stacks)
  if (g[0] === 0x64 && g[1] === 0xff9b && g.slice(2, 6).every((x) => x === 0)) return v4Private(embeddedV4); // NAT64 64:ff9b::/96
  if (g[0] === 0x2001 && g[1] === 0) return teredoPrivate(g); // Teredo 2001::/32
  if (g[0] === 0x2001 && g[1] === 2 && g[2] === 0) return true; // 2001:2::/48, benchmarking (as 198.18/15)
  // ISATAP: any /64 with the interface identifier 0:5efe:a.b.c.d (200:5efe: for a global IPv4; the group bit may be
  // set too). A host on the ISATAP link sends to that IPv4 address directly, so one inside a private range is a host
  // of the operator's network whatever the prefix.
  if ((g[4]! & 0xfcff) === 0 && g[5] === 0x5efe) return v4Private(embeddedV4);
  return false;
}

/**
 * Teredo (RFC 4380), 2001:0:SSSS:SSSS:flags:port:CCCC:CCCC: the Teredo server's IPv4 address in clear, and the client's
 * (the host the packets end at, through its NAT) XOR 0xffffffff in the last 32 bits. Either one private points into
 * the operator's network: `2001:0:a00:1::` relays through 10.0.0.1, `2001:0:808:808::80ff:fffe` ends at 127.0.0.1.
 */
function teredoPrivate(g: number[]): boolean {
  const server = ((g[2]! << 16) | g[3]!) >>> 0;
  const client = ~((g[6]! << 16) | g[7]!) >>> 0;
  return v4Private(server) || v4Private(client);
}

/**
 * Why an http(s) media URL is refused, or null: its host is a loopback, private, link-local or unspecified address
 * (IPv4 in any form the URL parser accepts, IPv6 including the forms that embed an IPv4 address: mapped, translated,
 * compatible, NAT64, 6to4, Teredo, ISATAP), a multicast or reserved address, or a name that
 * is never public (see above). A URL that
 * does not parse, or has a backslash, a control character, whitespace or user info, is refused too: another parser
 * (the upstream's) may find a different host in it (`http://example.com\\@127.0.0.1/`).
 */
export function privateMediaUrlIssue(url: string): string | null {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'Input should be a valid URL';
  }
  if (/[\\\s\x00-\x1f\x7f]/.test(url) || parsed.username || parsed.password || /^[a-z]+:\/\/[^/?#]*@/i.test(url)) {
    return 'URL must not contain user info, backslashes, whitespace or control characters';
  }
  let host = parsed.hostname.toLowerCase();
  if (host.endsWith('.')) host = host.slice(0, -1);
  if (host.startsWith('[') && host.endsWith(']')) {
    const g = parseV6(host.slice(1, -1));
    return g === null || v6Private(g) ? ADDRESS_REFUSED : null;
  }
  const v4 = parseV4(host);
  if (v4 !== null) return v4Private(v4) ? ADDRESS_REFUSED : null;
  return privateName(host) ? NAME_REFUSED : null;
}

/** The refusals, saying which kind of host was refused: `metadata.google.internal` is a name, not an address. */
const ADDRESS_REFUSED = 'URL points at a private, loopback or link-local address; the gateway does not pass such URLs on';
const NAME_REFUSED = 'URL points at a host name only a private network resolves (one without a dot, or under localhost, '
  + 'internal, local or another private-use suffix); the gateway does not pass such URLs on';

/** A host name (not an address) that only a private network resolves. */
function privateName(host: string): boolean {
  return !host.includes('.') || PRIVATE_NAMES.has(host) || PRIVATE_SUFFIXES.some((s) => host === s || host.endsWith(`.${s}`));
}

type Block = { type?: unknown; source?: { type?: unknown; url?: unknown; content?: unknown }; content?: unknown };

/**
 * Refuses the first http(s) image or document URL of the conversation that privateMediaUrlIssue refuses (400 naming
 * the field, `messages[0].content[1].source.url`): in a turn, inside a tool_result and inside a document's content.
 * Other URLs (not a string, not http) are left to the translator's own checks.
 */
export function refusePrivateMediaUrls(messages: readonly MessageParam[]): void {
  const walk = (blocks: unknown, at: string): void => {
    if (!Array.isArray(blocks)) return;
    blocks.forEach((raw, j) => {
      const b = raw as Block;
      const param = `${at}[${j}]`;
      const s = b?.source;
      if ((b?.type === 'image' || b?.type === 'document') && s?.type === 'url' && typeof s.url === 'string' && /^https?:\/\//i.test(s.url)) {
        const issue = privateMediaUrlIssue(s.url);
        if (issue) throw new GatewayError(400, 'invalid_value', `${param.replace(/\[(\d+)\]/g, '.$1')}.source.url: ${issue}`, { param: `${param}.source.url` });
      }
      if (b?.type === 'tool_result') walk(b.content, `${param}.content`);
      if (b?.type === 'document' && s?.type === 'content') walk(s.content, `${param}.source.content`);
    });
  };
  messages.forEach((m, i) => walk(m.content, `messages[${i}].content`));
}
