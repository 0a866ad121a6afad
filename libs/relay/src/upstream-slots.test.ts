import { describe, expect, test } from 'bun:test';
import { GatewayError, bunFetchLimit, openFileLimit } from '@gw/core';
import { MAX_UPSTREAM_CAP, UpstreamSlots, defaultUpstreamCap, fetchLimitFor, wantedFetchLimit } from './upstream-slots';

describe('UpstreamSlots', () => {
  test('takes up to max, then throws 503 overloaded_error with retry-after; a release is counted once', () => {
    const s = new UpstreamSlots(2);
    const a = s.acquire();
    const b = s.acquire();
    expect(s.inUse).toBe(2);
    let err: unknown;
    try { s.acquire(); } catch (e) { err = e; }
    expect(err).toBeInstanceOf(GatewayError);
    expect(err).toMatchObject({ status: 503, type: 'overloaded_error', code: 'upstream_capacity', headers: { 'retry-after': '1', connection: 'close' } });
    a();
    a();
    expect(s.inUse).toBe(1);
    s.acquire();
    b();
    expect(s.inUse).toBe(1);
  });
});

describe('sizing', () => {
  test('default cap: (nofile - min(1024, nofile/4)) / 2, within 1..MAX_UPSTREAM_CAP', () => {
    expect(defaultUpstreamCap(20_000)).toBe(9488);
    expect(defaultUpstreamCap(65_536)).toBe(32_256);
    expect(defaultUpstreamCap(1024)).toBe(384);
    expect(defaultUpstreamCap(1)).toBe(1);
    expect(defaultUpstreamCap(1 << 20)).toBe(MAX_UPSTREAM_CAP);
    expect(defaultUpstreamCap(null)).toBe(MAX_UPSTREAM_CAP);
    expect(fetchLimitFor(MAX_UPSTREAM_CAP)).toBe(65_535);
    expect(fetchLimitFor(100)).toBe(164);
  });

  test('open file limit from /proc/self/limits; Bun fetch limit from the start-up environment', () => {
    const text = 'Limit                     Soft Limit           Hard Limit           Units\nMax open files            20000                40000                files\n';
    expect(openFileLimit(text)).toBe(20_000);
    expect(openFileLimit('Max open files            unlimited            unlimited            files')).toBeNull();
    expect(openFileLimit('')).toBeNull();
    if (process.platform === 'linux') expect(openFileLimit()).toBeGreaterThan(0);
    expect(bunFetchLimit({})).toBe(256);
    expect(bunFetchLimit({ BUN_CONFIG_MAX_HTTP_REQUESTS: '9000' })).toBe(9000);
    expect(bunFetchLimit({ BUN_CONFIG_MAX_HTTP_REQUESTS: '70000' })).toBe(256);
  });

  test('the server restarts itself only when BUN_CONFIG_MAX_HTTP_REQUESTS is unset, sized to the cap', () => {
    expect(wantedFetchLimit({ BUN_CONFIG_MAX_HTTP_REQUESTS: '300' }, 20_000)).toBeNull();
    expect(wantedFetchLimit({}, 20_000)).toBe(9488 + 64);
    expect(wantedFetchLimit({ MAX_UPSTREAM_CONNECTIONS: '500' }, 20_000)).toBe(564);
    expect(wantedFetchLimit({ MAX_UPSTREAM_CONNECTIONS: 'lots' }, 20_000)).toBe(9488 + 64);
  });
});

describe('UpstreamSlots per-user share', () => {
  test('a user past its share gets 429 while the gateway has room; other users and unowned callers are not counted against it', () => {
    const s = new UpstreamSlots(4, 2);
    const a = s.acquire(1);
    s.acquire(1);
    expect(() => s.acquire(1)).toThrow(expect.objectContaining({ status: 429, code: 'user_upstream_share_exceeded' }));
    expect(s.inUse).toBe(2);
    s.acquire(2);
    s.acquire();
    expect(() => s.acquire(2)).toThrow(expect.objectContaining({ status: 503, code: 'upstream_capacity' }));
    a();
    a();
    expect(s.inUse).toBe(3);
    s.acquire(1);
    expect(() => s.acquire(1)).toThrow(expect.objectContaining({ status: 429 }));
  });
});
