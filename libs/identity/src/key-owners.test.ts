import { expect, test } from 'bun:test';
import { KeyOwners } from './key-owners';

test('keys are forgotten one by one, or all of a deleted user at once', () => {
  const o = new KeyOwners();
  o.set(1, 10);
  o.set(2, 10);
  o.set(3, 20);
  expect([o.get(1), o.get(2), o.get(3), o.get(4)]).toEqual([10, 10, 20, undefined]);
  o.forgetKey(1);
  expect(o.get(1)).toBeUndefined();
  o.forgetUser(10);
  expect(o.keyIds()).toEqual([3]);
  o.forgetUser(10);
  o.forgetKey(99);
  expect(o.keyIds()).toEqual([3]);
});

test("a key's index hash lives with its owner: unindexed it stays owned, forgotten with its owner", () => {
  const o = new KeyOwners();
  o.set(1, 10);
  expect(o.hashOf(1)).toBeUndefined();
  o.setHash(1, 'h1');
  o.set(1, 10);
  expect(o.hashOf(1)).toBe('h1');
  o.setHash(1, null);
  expect([o.get(1), o.hashOf(1)]).toEqual([10, undefined]);
  o.setHash(1, 'h1');
  o.set(2, 10);
  expect(o.keysOf(10)).toEqual([1, 2]);
  o.forgetUser(10);
  expect([o.get(1), o.hashOf(1), o.keysOf(10)]).toEqual([undefined, undefined, []]);
});
