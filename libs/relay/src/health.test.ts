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
});
