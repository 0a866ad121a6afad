/**
 * Media URL hosts refused as private, beyond the e2e test's: internal names (Docker/Compose service names, EC2's and
 * GCP's metadata names, private-use suffixes) and the reserved IPv4 and IPv6 ranges that reach the operator's network.
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
];
const PASSED = [
  'https://example.com/a.png', 'http://cdn.example.org/a.png', 'http://198.20.0.1/a.png', 'http://223.255.255.254/a.png',
  'http://[2002:808:808::1]/a.png', 'http://[::ffff:0:8.8.8.8]/a.png', 'http://[64:ff9b::8.8.8.8]/a.png',
  'http://local.example.com/a.png', 'http://internal.example.com/a.png',
];

describe('privateMediaUrlIssue', () => {
  test('refuses internal names and reserved ranges', () => {
    for (const url of REFUSED) expect({ url, issue: privateMediaUrlIssue(url) }).toEqual({ url, issue: expect.stringContaining('private') });
  });
  test('passes public names and addresses next to them', () => {
    for (const url of PASSED) expect({ url, issue: privateMediaUrlIssue(url) }).toEqual({ url, issue: null });
  });
});
