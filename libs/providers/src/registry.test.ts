import { expect, test } from 'bun:test';
import { adapterTypes, getAdapter, hasAdapter } from './registry';
import { joinUrl } from './url';

test('registry: built-ins, unknown type is a 500', () => {
  expect(adapterTypes()).toEqual(expect.arrayContaining(['anthropic', 'openai', 'openai-legacy']));
  expect(getAdapter('anthropic').type).toBe('anthropic');
  expect(() => getAdapter('nope')).toThrow(expect.objectContaining({ status: 500, code: 'unknown_channel_type' }));
  expect([hasAdapter('openai'), hasAdapter('nope')]).toEqual([true, false]);
});

test('joinUrl never doubles or drops the slash', () => {
  expect(joinUrl('https://a.b', '/v1/x')).toBe('https://a.b/v1/x');
  expect(joinUrl('https://a.b//', 'v1/x')).toBe('https://a.b/v1/x');
  expect(joinUrl('https://a.b/proxy/', '/v1/x')).toBe('https://a.b/proxy/v1/x');
});
