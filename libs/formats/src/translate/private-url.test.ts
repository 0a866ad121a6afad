/**
 * Media URL hosts refused as private, beyond the e2e test's: internal names (Docker/Compose service names, EC2's and
 * GCP's metadata names, private-use suffixes) and the reserved IPv4 and IPv6 ranges that reach the operator's network,
 * with the IPv6 forms that embed an IPv4 address (Teredo, ISATAP, 6to4, NAT64, mapped); and the refusal's wording.
 */
import { describe, expect, test } from 'bun:test';
import { privateMediaUrlIssue } from './private-url';

const REFUSED = [
  'http://redis:6379/', 'http://postgres/a.png', 'http://instance-data/latest/meta-data/', 'http://ip6-localhost/a.png',
  'http://ip6-loopback/a.png', 'http://metadata.google.internal/computeMetadata/v1/', 'http://api.internal/a.png',
  'http://printer.local/a.png', 'http://box.localdomain/a.png', 'http://nas.home.arpa/a.png', 'http://router.lan/a.png',
  'http://wiki.intranet/a.png', 'http://METADATA.GOOGLE.INTERNAL./a.png',
  'http://198.18.0.1/a.png', 'http://198.19.255.254/a.png', 'http://240.0.0.1/a.png', 'http://255.255.255.255/a.png',
  'http://224.0.0.1/a.png', 'http://239.255.255.250/a.png', 'http://192.0.0.192/opc/v2/instance/',
  'http://[fec0::1]/a.png', 'http://[64:ff9b:1::a]/a.png', 'http://[::ffff:0:127.0.0.1]/a.png', 'http://[::ffff:0:a00:5]/a.png',
  'http://[2002:7f00:1::1]/a.png', 'http://[2002:a9fe:a9fe::]/a.png', 'http://[ff02::1]/a.png', 'http://[fd00:ec2::254]/latest/', 'http://100.100.100.200/latest/meta-data/',
  // Teredo: the client (last 32 bits, inverted) 127.0.0.1, 169.254.169.254, 10.0.0.5; the server 10.0.0.1, 192.168.1.1.
  'http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/a.png', 'http://[2001:0:4136:e378:8000:63bf:5601:5601]/latest/',
  'http://[2001:0000:4136:e378:8000:63bf:f5ff:fffa]/a.png', 'http://[2001:0:a00:1:8000:63bf:3fff:fdd2]/a.png', 'http://[2001::c0a8:101:0:0:3fff:fdd2]/a.png',
  // ISATAP with a private IPv4 (any prefix, u/l and group bits either way), and IPv6 benchmarking (as 198.18/15).
  'http://[2001:db8:1:2:0:5efe:a00:5]/a.png', 'http://[2001:db8::200:5efe:a9fe:a9fe]/latest/', 'http://[2a00:1450::300:5efe:7f00:1]/a.png',
  'http://[2001:db8::5efe:192.168.0.1]/a.png', 'http://[2001:2::1]/a.png', 'http://[2001:2:0:ffff::1]/a.png',
];
const PASSED = [
  'https://example.com/a.png', 'http://cdn.example.org/a.png', 'http://198.20.0.1/a.png', 'http://223.255.255.254/a.png',
  'http://[2002:808:808::1]/a.png', 'http://[::ffff:0:8.8.8.8]/a.png', 'http://[64:ff9b::8.8.8.8]/a.png',
  'http://local.example.com/a.png', 'http://internal.example.com/a.png',
  // Teredo of public addresses (RFC 4380's example: server 65.54.227.120, client 192.0.2.45), ISATAP of 8.8.8.8,
  // and the neighbours of 2001:2::/48.
  'http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/a.png', 'http://[2001:db8::200:5efe:808:808]/a.png', 'http://[2001:2:1::1]/a.png',
  'http://[2001:3::1]/a.png', 'http://[2001:1::5efe]/a.png',
];

describe('privateMediaUrlIssue', () => {
  test('refuses internal names and reserved ranges', () => {
    for (const url of REFUSED) expect({ url, issue: privateMediaUrlIssue(url) }).toEqual({ url, issue: expect.stringContaining('private') });
  });
  test('says whether it refused a host name or an address', () => {
    for (const url of ['http://metadata.google.internal/computeMetadata/v1/', 'http://redis:6379/', 'http://printer.local/a.png', 'http://localhost/a.png']) {
      expect({ url, issue: privateMediaUrlIssue(url) }).toEqual({ url, issue: expect.stringMatching(/^URL points at a host name only a private network resolves/) });
    }
    for (const url of ['http://169.254.169.254/latest/', 'http://[::1]/a.png', 'http://2130706433/a.png', 'http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/']) {
      expect({ url, issue: privateMediaUrlIssue(url) }).toEqual({ url, issue: expect.stringMatching(/^URL points at a private, loopback or link-local address/) });
    }
  });
  test('passes public names and addresses next to them', () => {
    for (const url of PASSED) expect({ url, issue: privateMediaUrlIssue(url) }).toEqual({ url, issue: null });
  });
});
