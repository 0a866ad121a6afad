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

test('a shared lock is taken inside the turn and released after; refused → null; unreachable → runs on this node\'s turn alone', async () => {
  const events: string[] = [];
  const locked = new KeyedTurns(4, async (key) => { events.push(`lock ${key}`); return async () => { events.push(`unlock ${key}`); }; });
  expect(await locked.run('u1', async () => { events.push('run'); return 1; })).toEqual({ value: 1 });
  await expect(locked.run('u1', async () => { events.push('throw'); throw new Error('x'); })).rejects.toThrow('x');
  expect(events).toEqual(['lock u1', 'run', 'unlock u1', 'lock u1', 'throw', 'unlock u1']);
  let ran = false;
  const busy = new KeyedTurns(4, async () => null);
  expect(await busy.run('u1', async () => { ran = true; return 1; })).toBeNull();
  expect(ran).toBe(false);
  const errors: unknown[] = [];
  const down = new KeyedTurns(4, async () => { throw new Error('redis down'); }, (e) => errors.push(e));
  expect(await down.run('u1', async () => 2)).toEqual({ value: 2 });
  expect(errors.map((e) => (e as Error).message)).toEqual(['redis down']);
});
