import { describe, expect, test } from 'bun:test';
import { KeyPicker } from './keys';

const listing = (statuses: number[]) => statuses.map((status, i) => ({ id: i + 1, fingerprint: `f${i + 1}`, apiKey: `k${i + 1}`, status }));

describe('KeyPicker', () => {
  test('a key set aside is never picked again from the same listing, at random or in turn', () => {
    for (const keySelection of ['random', 'round_robin']) {
      const ch = { id: 1, keySelection, keys: listing([1, 1, 1]) };
      const picker = new KeyPicker();
      picker.setAside(ch, 2);
      const picked = new Set(Array.from({ length: 60 }, () => picker.pick(ch, new Set())!.id));
      expect([...picked].sort()).toEqual([1, 3]);
      picker.setAside(ch, 1);
      picker.setAside(ch, 3);
      expect(picker.pick(ch, new Set())).toBeUndefined();
    }
  });

  test("the channel's next listing (its reload) ends the mark: the stored status decides again", () => {
    const picker = new KeyPicker();
    const before = { id: 1, keySelection: 'round_robin', keys: listing([1, 1]) };
    picker.setAside(before, 1);
    expect(picker.pick(before, new Set())!.id).toBe(2);
    expect(picker.pick(before, new Set())!.id).toBe(2);
    // Reloaded with the key enabled (re-enabled, or its disable was never written): picked again.
    const after = { ...before, keys: listing([1, 1]) };
    const picked = new Set(Array.from({ length: 4 }, () => picker.pick(after, new Set())!.id));
    expect([...picked].sort()).toEqual([1, 2]);
  });
});
