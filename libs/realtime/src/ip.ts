/**
 * API key IP allow-lists: exact addresses or CIDR ranges, IPv4 and IPv6 (IPv4-mapped IPv6 such as
 * `::ffff:127.0.0.1` matches IPv4 entries).
 */

function v4(addr: string): bigint | null {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(addr);
  if (!m) return null;
  let v = 0n;
  for (let i = 1; i <= 4; i++) {
    const o = Number(m[i]);
    if (o > 255) return null;
    v = (v << 8n) | BigInt(o);
  }
  return v;
}

function v6(addr: string): bigint | null {
  if (!addr.includes(':')) return null;
  let s = addr.replace(/^\[|\]$/g, '').split('%')[0]!;
  const tail = /(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  if (tail) {
    const t = v4(tail[1]!);
    if (t === null) return null;
    s = `${s.slice(0, -tail[1]!.length)}${(t >> 16n).toString(16)}:${(t & 0xffffn).toString(16)}`;
  }
  const halves = s.split('::');
  if (halves.length > 2) return null;
  const head = halves[0] ? halves[0].split(':') : [];
  const rest = halves.length === 2 && halves[1] ? halves[1].split(':') : [];
  const missing = 8 - head.length - rest.length;
  if ((halves.length === 1 && missing !== 0) || missing < 0) return null;
  const groups = [...head, ...Array(halves.length === 2 ? missing : 0).fill('0'), ...rest];
  let v = 0n;
  for (const g of groups) {
    if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return null;
    v = (v << 16n) | BigInt(parseInt(g, 16));
  }
  return v;
}

/** Address as [bits, value]; IPv4-mapped IPv6 is reduced to IPv4. */
function parse(addr: string): [32 | 128, bigint] | null {
  const a = v4(addr.trim());
  if (a !== null) return [32, a];
  const b = v6(addr.trim());
  if (b === null) return null;
  if (b >> 32n === 0xffffn) return [32, b & 0xffffffffn];
  return [128, b];
}

/** True when `ip` matches one entry of `allow` (address or CIDR). */
export function ipAllowed(ip: string, allow: string[]): boolean {
  const addr = parse(ip);
  if (!addr) return false;
  for (const entry of allow) {
    const [base, lenText] = entry.trim().split('/');
    const net = parse(base ?? '');
    if (!net || net[0] !== addr[0]) continue;
    const bits = addr[0];
    const len = lenText === undefined ? bits : Number(lenText);
    if (!Number.isInteger(len) || len < 0 || len > bits) continue;
    const shift = BigInt(bits - len);
    if (addr[1] >> shift === net[1] >> shift) return true;
  }
  return false;
}
