import { describe, expect, test } from 'bun:test';
import { ChannelHealth } from './health';

function harness(probeOk: () => boolean) {
  const status = new Map<number, number>([[1, 1]]);
  let probes = 0;
  const h = new ChannelHealth({
    all: () => [...status].map(([id, s]) => ({ id, status: s })),
    get: (id) => (status.has(id) ? { id, status: status.get(id)! } : undefined),
    setStatus: async (id, s) => { status.set(id, s); },
    probe: async () => { probes++; return probeOk(); },
  }, { threshold: 3, probeIntervalMs: 60_000 });
  return { h, status, probes: () => probes };
}

describe('ChannelHealth', () => {
  test('below the threshold nothing is probed or disabled', async () => {
    const t = harness(() => false);
    expect(await t.h.failure(1, 'x')).toBe(false);
    expect(await t.h.failure(1, 'x')).toBe(false);
    expect([t.probes(), t.status.get(1)]).toEqual([0, 1]);
  });

  test('at the threshold a failed probe disables the channel', async () => {
    const t = harness(() => false);
    await t.h.failure(1, 'x');
    await t.h.failure(1, 'x');
    expect(await t.h.failure(1, 'boom')).toBe(true);
    expect([t.probes(), t.status.get(1)]).toEqual([1, 3]);
  });

  test('a channel whose probe succeeds is kept and its streak starts again (client-triggered failures)', async () => {
    const t = harness(() => true);
    for (let i = 0; i < 3; i++) await t.h.failure(1, 'x');
    expect([t.probes(), t.status.get(1), t.h.recentFailures(1)]).toEqual([1, 1, 0]);
  });

  test('one probe at a time per channel, and an operator change during the probe wins', async () => {
    const t = harness(() => false);
    await t.h.failure(1, 'x');
    await t.h.failure(1, 'x');
    const pending = t.h.failure(1, 'x');
    const concurrent = t.h.failure(1, 'x');
    t.status.set(1, 2); // the operator disables it meanwhile
    expect(await pending).toBe(false);
    expect(await concurrent).toBe(false);
    expect([t.probes(), t.status.get(1)]).toEqual([1, 2]);
  });

  test("a key's proof and shared probe belong to its value, not its id: a new key under the same id is probed itself", async () => {
    const probed: string[] = [];
    const h = new ChannelHealth({
      all: () => [], get: (id) => ({ id, status: 1 }), setStatus: async () => {},
      probe: async (_id, key) => { probed.push(key!.fingerprint); return key!.fingerprint === 'old'; },
    }, { threshold: 3, probeIntervalMs: 60_000 });
    // The old key passes its probe (the refusal was the request's) and is trusted for a while...
    expect(await h.keyRefused(1, { id: 1, fingerprint: 'old' })).toBe(false);
    expect(await h.keyRefused(1, { id: 1, fingerprint: 'old' })).toBe(false);
    // ...which says nothing of the operator's new key 1: it is probed, and refused.
    expect(await h.keyRefused(1, { id: 1, fingerprint: 'new' })).toBe(true);
    expect(probed).toEqual(['old', 'new']);
  });

  test("a replaced key's probe schedule is dropped, and the prober probes and re-enables the key it read", async () => {
    let keys = [{ id: 1, fingerprint: 'old', status: 3 }];
    const probed: string[] = [];
    const reEnabled: string[] = [];
    let t = 0;
    const h = new ChannelHealth({
      all: () => [{ id: 1, status: 1, keys }], get: () => ({ id: 1, status: 1, keys }), setStatus: async () => {},
      probe: async (_id, key) => { probed.push(key!.fingerprint); return true; },
      reEnableKey: async (_id, key) => { reEnabled.push(key.fingerprint); },
    }, { threshold: 3, probeIntervalMs: 1000, now: () => t });
    await h.probeOnce(false); // first seen down: scheduled, not probed
    const schedules = () => (h as unknown as { lastProbe: Map<string, number> }).lastProbe.size;
    expect([probed, schedules()]).toEqual([[], 1]);
    keys = [{ id: 1, fingerprint: 'new', status: 3 }];
    t = 500;
    await h.probeOnce(false);
    expect([probed, schedules()]).toEqual([[], 1]); // the new key's own schedule; the old one is gone
    t = 1600;
    await h.probeOnce(false);
    expect([probed, reEnabled]).toEqual([['new'], ['new']]);
  });
});
