import { expect, test } from 'bun:test';
import { jsonDepthWithin, parseBoundedJson } from './bounded-json';

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
