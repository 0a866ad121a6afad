import { expect, test } from 'bun:test';
import { SerialQueue } from './serial';

test('steps apply in queue order even when a later read answers first; a failure does not stop the rest', async () => {
  const q = new SerialQueue();
  const applied: string[] = [];
  const slow = q.run(async () => { await Bun.sleep(20); applied.push('slow'); });
  const failing = q.run(async () => { throw new Error('boom'); });
  const fast = q.run(async () => { applied.push('fast'); return 7; });
  await slow;
  await expect(failing).rejects.toThrow('boom');
  expect(await fast).toBe(7);
  expect(applied).toEqual(['slow', 'fast']);
});
