import { describe, expect, test } from 'bun:test';
import { BatchedRefresh } from './batched-refresh';

describe('BatchedRefresh', () => {
  test('asks made while a batch runs are read together by the next, after it; none is lost', async () => {
    const batches: Array<number[] | null> = [];
    let release!: () => void;
    let gate: Promise<void> | null = new Promise<void>((r) => { release = r; });
    const q = new BatchedRefresh<number>(async (keys) => {
      batches.push(keys);
      if (gate) { const g = gate; gate = null; await g; }
    });
    const first = q.run(1);
    await Bun.sleep(1);
    const later = [2, 3, 2, 4].map((k) => q.run(k));
    release();
    await Promise.all([first, ...later]);
    expect(batches).toEqual([[1], [2, 3, 4]]);
  });

  test('null makes the pending batch a full reload; a failed batch rejects its asks only', async () => {
    const batches: Array<number[] | null> = [];
    let fail = true;
    const q = new BatchedRefresh<number>(async (keys) => {
      batches.push(keys);
      if (fail) { fail = false; throw new Error('refused'); }
    });
    const failed = q.run(1);
    const same = q.run(2);
    expect(failed).rejects.toThrow('refused');
    expect(same).rejects.toThrow('refused');
    await Promise.allSettled([failed, same]);
    await Promise.all([q.run(5), q.run(null), q.run(6)]);
    expect(batches).toEqual([[1, 2], null]);
  });
});
