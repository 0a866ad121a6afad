import { describe, expect, test } from 'bun:test';
import { attemptKeyOfIp, boundedIpText, forwardedAddress, ipAllowed, isIpOrCidr, parseIp, parseRange } from './ip-allow';

describe('parseIp', () => {
  test('IPv4, IPv6 (compressed, embedded v4, zone, brackets) and IPv4-mapped IPv6', () => {
    expect(parseIp('192.168.1.2')).toEqual({ v: 4, n: 0xc0a80102n });
    expect(parseIp('::1')).toEqual({ v: 6, n: 1n });
    expect(parseIp('[2001:db8::1]')).toEqual({ v: 6, n: 0x20010db8000000000000000000000001n });
    expect(parseIp('fe80::1%eth0')).toEqual({ v: 6, n: 0xfe800000000000000000000000000001n });
    expect(parseIp('::ffff:10.0.0.1')).toEqual({ v: 4, n: 0x0a000001n });
    expect(parseIp('::ffff:a00:1')).toEqual({ v: 4, n: 0x0a000001n });
    expect(parseIp('64:ff9b::1.2.3.4')?.v).toBe(6);
  });

  test('rejects malformed addresses', () => {
    for (const bad of ['', '1.2.3', '1.2.3.4.5', '256.1.1.1', '01.2.3.4', '1::2::3', '1:2:3:4:5:6:7:8:9', 'g::1', 'example.com', '1.2.3.4/8']) {
      expect({ bad, parsed: parseIp(bad) }).toEqual({ bad, parsed: null });
    }
  });
});

describe('parseRange / isIpOrCidr', () => {
  test('masks host bits and validates prefix lengths', () => {
    expect(parseRange('10.1.2.3/8')).toEqual({ v: 4, net: 0x0a000000n, bits: 8 });
    expect(parseRange('2001:db8::/32')).toEqual({ v: 6, net: 0x20010db8n << 96n, bits: 32 });
    expect(parseRange('::ffff:192.168.0.0/112')).toEqual({ v: 4, net: 0xc0a80000n, bits: 16 });
    expect(isIpOrCidr('0.0.0.0/0')).toBe(true);
    expect(isIpOrCidr('::/0')).toBe(true);
    for (const bad of ['10.0.0.0/33', '::/129', '10.0.0.0/', '10.0.0.0/8/8', '10.0.0.0/-1', 'x/8']) expect({ bad, ok: isIpOrCidr(bad) }).toEqual({ bad, ok: false });
  });
});

describe('ipAllowed', () => {
  test('no list allows everything; otherwise only matching addresses of the same family', () => {
    expect(ipAllowed(null, 'garbage')).toBe(true);
    expect(ipAllowed([], '1.1.1.1')).toBe(true);
    const list = ['10.0.0.0/8', '192.168.1.5', '2001:db8::/48'];
    expect(ipAllowed(list, '10.255.255.255')).toBe(true);
    expect(ipAllowed(list, '11.0.0.0')).toBe(false);
    expect(ipAllowed(list, '192.168.1.5')).toBe(true);
    expect(ipAllowed(list, '192.168.1.6')).toBe(false);
    expect(ipAllowed(list, '::ffff:192.168.1.5')).toBe(true);
    expect(ipAllowed(list, '2001:db8:0:ffff::1')).toBe(true);
    expect(ipAllowed(list, '2001:db8:1::1')).toBe(false);
    expect(ipAllowed(list, 'not-an-ip')).toBe(false);
    expect(ipAllowed(['bogus-entry'], '1.2.3.4')).toBe(false);
  });
});

describe('attemptKeyOfIp', () => {
  test('IPv4 as itself, IPv4-mapped as IPv4, IPv6 by its /64 whatever the spelling, anything else as given', () => {
    expect(attemptKeyOfIp('203.0.113.7')).toBe('203.0.113.7');
    expect(attemptKeyOfIp('::ffff:203.0.113.7')).toBe('203.0.113.7');
    expect(attemptKeyOfIp('::ffff:cb00:7107')).toBe('203.0.113.7');
    const key = attemptKeyOfIp('2001:db8:a:b::1');
    expect(key).toBe('2001:db8:a:b::/64');
    for (const same of ['2001:0DB8:000a:000b:ffff:ffff:ffff:ffff', '[2001:db8:a:b::2]', 'fe80::1%eth0'.replace('fe80::1', '2001:db8:a:b::3')]) {
      expect(attemptKeyOfIp(same)).toBe(key);
    }
    expect(attemptKeyOfIp('2001:db8:a:c::1')).not.toBe(key);
    expect(attemptKeyOfIp('::1')).toBe('0:0:0:0::/64');
    expect(attemptKeyOfIp('')).toBe('');
    expect(attemptKeyOfIp('not-an-ip')).toBe('not-an-ip');
  });

  test('text longer than an address is its own key, short and fixed-size (one per text)', () => {
    const long = 'x'.repeat(5000);
    const key = attemptKeyOfIp(long);
    expect(key.length).toBeLessThanOrEqual(72);
    expect(attemptKeyOfIp(long)).toBe(key);
    expect(attemptKeyOfIp(`${long}y`)).not.toBe(key);
    expect(attemptKeyOfIp('x'.repeat(64))).toBe('x'.repeat(64));
    // An address the gateway recorded bounded so counts under the same key.
    expect(attemptKeyOfIp(boundedIpText(long))).toBe(key);
    expect(boundedIpText(key)).toBe(key);
  });
});

describe('forwardedAddress', () => {
  test('a port, brackets, quotes and spaces are dropped; an entry that is no address is null', () => {
    const cases: Array<[string, string | null]> = [
      ['1.2.3.4', '1.2.3.4'], [' 1.2.3.4:5678 ', '1.2.3.4'], ['"1.2.3.4:80"', '1.2.3.4'], ['[2001:db8::1]:443', '2001:db8::1'],
      ['[::1]', '::1'], ['::1', '::1'], ['::ffff:1.2.3.4', '::ffff:1.2.3.4'], ['[::ffff:1.2.3.4]:9', '::ffff:1.2.3.4'],
      ['1.2.3.4:99999x', null], ['1.2.3.4:5:6', null], ['unknown', null], ['', null], ['"', null], ['[2001:db8::1]:', null],
      ['[1.2.3.4]:80', '1.2.3.4'], ['2001:db8::1:443', '2001:db8::1:443'], ['[ 1.2.3.4 ]', '1.2.3.4'],
      ['fe80::1%eth0', null], [`[fe80::1%${'x'.repeat(5000)}]:80`, null],
    ];
    for (const [entry, want] of cases) expect([entry, forwardedAddress(entry)]).toEqual([entry, want]);
  });
});
