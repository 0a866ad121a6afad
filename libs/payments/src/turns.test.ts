import { expect, test } from 'bun:test';
import { KeyedTurns } from './turns';

test('one holder per key, in arrival order; over maxWaiting is refused at once; other keys run alongside', async () => {
  const turns = new KeyedTurns(1);
  const order: string[] = [];
  let open!: () => void;
  const gate = new Promise<void>((r) => { open = r; });
  const first = turns.run('u1', async () => { await gate; order.push('first'); return 1; });
  const second = turns.run('u1', async () => { order.push('second'); return 2; });
  expect(await turns.run('u1', async () => 3)).toBeNull();
  expect(await turns.run('u2', async () => { order.push('other'); return 4; })).toEqual({ value: 4 });
  open();
  expect([await first, await second]).toEqual([{ value: 1 }, { value: 2 }]);
  expect(order).toEqual(['other', 'first', 'second']);
  // Idle again: a new holder runs at once, and a failure releases the turn.
  await expect(turns.run('u1', async () => { throw new Error('x'); })).rejects.toThrow('x');
  expect(await turns.run('u1', async () => 5)).toEqual({ value: 5 });
});
