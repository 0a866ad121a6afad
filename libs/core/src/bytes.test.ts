import { describe, expect, test } from 'bun:test';
import { coalesceBytes, concatBytes, SEPARATE_WRITE_BYTES } from './bytes';

const bytes = (n: number, v: number) => new Uint8Array(n).fill(v);

describe('coalesceBytes', () => {
  test('joins each run of small parts, leaves large parts as they are (the same object: no copy), keeps the order', () => {
    const big1 = bytes(SEPARATE_WRITE_BYTES, 2);
    const big2 = bytes(70_000, 5).subarray(100); // a view into a larger buffer stays that view
    const parts = [bytes(10, 1), bytes(20, 1), big1, bytes(5, 3), big2, bytes(1, 6), bytes(2, 7)];
    const out = coalesceBytes(parts);
    expect(out.map((p) => p.byteLength)).toEqual([30, SEPARATE_WRITE_BYTES, 5, 69_900, 3]);
    expect(out[1]).toBe(big1);
    expect(out[3]).toBe(big2);
    expect(concatBytes(out)).toEqual(concatBytes(parts)!);
  });

  test('one part or none comes back as given', () => {
    const one = [bytes(3, 1)];
    expect(coalesceBytes(one)).toBe(one);
    expect(coalesceBytes([])).toEqual([]);
  });
});
