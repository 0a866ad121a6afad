import { expect, test } from 'bun:test';
import type { Leader } from '@gw/core';
import type { AlertOutboxStore } from '@gw/db';
import { OutboxRetention } from './outbox-retention';

const leader: Leader = { isLeader: true, onChange: () => () => {}, close: async () => {} };

/** A store whose prune answers `batches` in turn, noting each call and whether the event loop turned before it. */
function store(batches: number[]) {
  const calls: Array<{ before: number; turned: boolean }> = [];
  let turned = false;
  const repo = {
    prune(before: number) {
      calls.push({ before, turned });
      turned = false;
      setImmediate(() => { turned = true; });
      return batches.shift() ?? 0;
    },
  } as unknown as AlertOutboxStore;
  return { repo, calls };
}

test('a backlog is pruned in batches with an event-loop turn between them (SQLite prunes synchronously)', async () => {
  const { repo, calls } = store([5000, 5000, 12]);
  const r = new OutboxRetention(repo, { retentionDays: 30, pruneMs: 3_600_000 }, undefined, () => 100 * 86_400_000);
  r.follow(leader);
  for (let t = 0; calls.length < 3 && t < 100; t++) await Bun.sleep(5);
  await r.close();
  expect(calls.map((c) => c.turned)).toEqual([false, true, true]);
  expect(calls[0]!.before).toBe(70 * 86_400_000);
});

test('retention 0 keeps every alert but still prunes the caps of ended periods', async () => {
  const { repo, calls } = store([3]);
  const r = new OutboxRetention(repo, { retentionDays: 0, pruneMs: 3_600_000 }, undefined, () => 100 * 86_400_000);
  r.follow(leader);
  for (let t = 0; calls.length < 1 && t < 100; t++) await Bun.sleep(5);
  await r.close();
  expect(calls).toEqual([{ before: 0, turned: false }]);
});
