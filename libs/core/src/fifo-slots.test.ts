import { expect, test } from 'bun:test';
import { FifoSlots } from './fifo-slots';

/** A holder that notes when it got the slot and gives it back on the next turn. */
async function hold(slots: FifoSlots, got: string[], name: string, key?: unknown, maxWaiting = Infinity): Promise<boolean> {
  const release = await slots.acquire(maxWaiting, key);
  if (!release) return false;
  got.push(name);
  await Bun.sleep(0);
  release();
  return true;
}

test('waiters are served round-robin by key, in arrival order within a key', async () => {
  const slots = new FifoSlots(1);
  const got: string[] = [];
  const all = [hold(slots, got, 'a0', 'a'), ...['a1', 'a2', 'a3'].map((n) => hold(slots, got, n, 'a')),
    hold(slots, got, 'b1', 'b'), hold(slots, got, 'c1', 'c'), hold(slots, got, 'b2', 'b')];
  expect(slots.load).toEqual({ running: 1, waiting: 6 });
  await Promise.all(all);
  // a's backlog no longer holds b and c back: one of a's, then one of each other key, in turn.
  expect(got).toEqual(['a0', 'a1', 'b1', 'c1', 'a2', 'b2', 'a3']);
  expect(slots.load).toEqual({ running: 0, waiting: 0 });
});

test('without keys it is plain FIFO, and maxWaiting still bounds the waiters of all keys together', async () => {
  const slots = new FifoSlots(1);
  const got: string[] = [];
  const all = [hold(slots, got, 'x0'), hold(slots, got, 'x1'), hold(slots, got, 'x2'), hold(slots, got, 'x3', undefined, 3), hold(slots, got, 'z1', 'z', 3)];
  expect(await Promise.all(all)).toEqual([true, true, true, true, false]);
  expect(got).toEqual(['x0', 'x1', 'x2', 'x3']);
  expect(slots.load).toEqual({ running: 0, waiting: 0 });
});
