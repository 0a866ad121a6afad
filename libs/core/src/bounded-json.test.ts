import { describe, expect, test } from 'bun:test';
import { jsonDepthWithin, jsonShapeWithin, jsonValueCount, parseBoundedJson } from './bounded-json';

const enc = (s: string) => s;

test('depth counts nesting, not brackets inside strings (escaped quotes included)', () => {
  expect(jsonDepthWithin(enc('[[[]]]'), 3)).toBe(true);
  expect(jsonDepthWithin(enc('[[[[]]]]'), 3)).toBe(false);
  expect(jsonDepthWithin(enc('{"a":[{"b":1}]}'), 3)).toBe(true);
  expect(jsonDepthWithin(enc('{"a":[{"b":{}}]}'), 3)).toBe(false);
  expect(jsonDepthWithin(enc(JSON.stringify({ s: '[[[[{{{{\\"[[[[' })), 1)).toBe(true);
  expect(jsonDepthWithin(enc(JSON.stringify(['\\', [[]]])), 2)).toBe(false);
});

test('parse: too deep, invalid, empty, and ordinary documents', () => {
  expect(parseBoundedJson(enc('['.repeat(100_000) + ']'.repeat(100_000)), 64)).toEqual({ ok: false, reason: 'too_deep' });
  expect(parseBoundedJson(enc('{"a":'), 64)).toEqual({ ok: false, reason: 'invalid' });
  expect(parseBoundedJson(enc('  '), 64)).toEqual({ ok: true, value: {} });
  expect(parseBoundedJson(enc('{"n":9007199254740993,"s":"ü"}'), 64)).toEqual({ ok: true, value: { n: 9007199254740992, s: 'ü' } });
});

test('the depth scan is linear: 8 MB of shallow JSON in well under a second', () => {
  const big = (JSON.stringify(Array.from({ length: 200_000 }, (_, i) => ({ i, s: 'x'.repeat(20) }))));
  const t = performance.now();
  expect(jsonDepthWithin(big, 64)).toBe(true);
  expect(performance.now() - t).toBeLessThan(500);
});

describe('jsonValueCount / jsonShapeWithin', () => {
  const b = (s: string) => new TextEncoder().encode(s);
  test('counts separators and openers outside strings only (escaped quotes and backslashes handled)', () => {
    expect(jsonValueCount(b('{"a":[1,2,3],"b":"x, [y] {z}"}'), 10, 100)).toBe(5);
    expect(jsonValueCount(b('["a\\\\",{},"\\"[,{"]'), 10, 100)).toBe(4);
    expect(jsonValueCount(b('"just, a [string]"'), 10, 100)).toBe(0);
  });
  test('refuses past the value bound or the depth bound', () => {
    // `[`, 100 objects and 99 commas: 200.
    expect(jsonShapeWithin(b(`[${'{},'.repeat(99)}{}]`), 10, 200)).toBe(true);
    expect(jsonShapeWithin(b(`[${'{},'.repeat(100)}{}]`), 10, 200)).toBe(false);
    expect(jsonShapeWithin(b('[[[[]]]]'), 4, 100)).toBe(true);
    expect(jsonShapeWithin(b('[[[[[]]]]]'), 4, 100)).toBe(false);
  });
  test('an unterminated string ends the scan (the parser refuses the text)', () => {
    expect(jsonValueCount(b('{"a":"never ends, {[ '), 10, 100)).toBe(1);
  });
});
