import { expect, test } from 'bun:test';
import { keyWidening, type KeyTerms } from './key-widening';

const base: KeyTerms = {
  expiresAt: 2_000_000_000, unlimitedQuota: false, remainQuota: 1000, models: ['gpt-4o', 'claude-3'], allowIps: ['10.1.0.0/16', '192.0.2.7'],
  group: null, rateLimitRpm: 60, rateLimitTpm: 10_000, maxConcurrency: 4, modelLimits: { 'claude-*': { rateLimitRpm: 10, rateLimitTpm: 0, maxConcurrency: 2 } },
};
const w = (after: Partial<KeyTerms>, before: Partial<KeyTerms> = {}) => keyWidening({ ...base, ...before }, { ...base, ...before, ...after }, 'default');

test('nothing changed, or only narrowed: nothing to report', () => {
  expect(w({})).toEqual([]);
  expect(w({ allowIps: ['10.1.2.0/24'] })).toEqual([]);
  expect(w({ allowIps: ['10.1.0.0/17', '10.1.128.0/17', '192.0.2.7'] })).toEqual([]);
  expect(w({ allowIps: ['10.0.0.1'] }, { allowIps: null })).toEqual([]);
  expect(w({ models: ['gpt-4o'] })).toEqual([]);
  expect(w({ models: ['gpt-4o'] }, { models: null })).toEqual([]);
  expect(w({ remainQuota: 10 })).toEqual([]);
  expect(w({ unlimitedQuota: false, remainQuota: 5 }, { unlimitedQuota: true })).toEqual([]);
  expect(w({ remainQuota: 10 ** 9 }, { unlimitedQuota: true })).toEqual([]);
  expect(w({ expiresAt: 1_900_000_000 })).toEqual([]);
  expect(w({ expiresAt: 1_900_000_000 }, { expiresAt: null })).toEqual([]);
  expect(w({ group: 'default' })).toEqual([]);
  expect(w({ rateLimitRpm: 30, rateLimitTpm: 5, maxConcurrency: 1 })).toEqual([]);
  expect(w({ rateLimitRpm: 30 }, { rateLimitRpm: 0 })).toEqual([]);
  expect(w({ modelLimits: { 'claude-*': { rateLimitRpm: 5, rateLimitTpm: 100, maxConcurrency: 1 } } })).toEqual([]);
  // A new, stricter pattern under an old one narrows; one where none applied before only adds a limit.
  expect(w({ modelLimits: { ...base.modelLimits, 'claude-opus': { rateLimitRpm: 1, rateLimitTpm: 0, maxConcurrency: 1 } } })).toEqual([]);
  expect(w({ modelLimits: { ...base.modelLimits, 'gpt-*': { rateLimitRpm: 1000, rateLimitTpm: 0, maxConcurrency: 0 } } })).toEqual([]);
});

test('an IP allow-list removed or reaching addresses no old entry did', () => {
  expect(w({ allowIps: null })).toEqual(['IP allow-list removed (any address)']);
  expect(w({ allowIps: [] })).toEqual(['IP allow-list removed (any address)']);
  expect(w({ allowIps: ['10.0.0.0/8'] })).toEqual(['IP allow-list: now also 10.0.0.0/8']);
  expect(w({ allowIps: ['10.1.0.0/16', '192.0.2.8', '2001:db8::/32'] })).toEqual(['IP allow-list: now also 2001:db8::/32, 192.0.2.8']);
  // The IPv4-mapped form of an old address is the same address.
  expect(w({ allowIps: ['::ffff:192.0.2.7'] })).toEqual([]);
  // A zone id is free text once parsed away: shown quoted, it cannot read as another line's words.
  expect(w({ allowIps: ['fe80::1%x; models: now any'] })).toEqual(['IP allow-list: now also "fe80::1%x; models: now any"']);
  expect(w({ allowIps: ['1.1.1.1', '1.1.1.2', '1.1.1.3', '1.1.1.4', '1.1.1.5'] })).toEqual(['IP allow-list: now also 1.1.1.1, 1.1.1.2, 1.1.1.3 and 2 more']);
});

test('models cleared or added, names quoted so they cannot pose as other text', () => {
  expect(w({ models: null })).toEqual(['models: now any']);
  expect(w({ models: [] })).toEqual(['models: now any']);
  expect(w({ models: ['gpt-4o', 'o1"; quota: fine'] })).toEqual(['models: now also "o1\\"; quota: fine"']);
  expect(w({ models: ['a', 'b', 'c', 'd', 'e'] })).toEqual(['models: now also "a", "b", "c" and 2 more']);
  expect(w({ models: ['x'.repeat(200)] })[0]!.length).toBeLessThan(70);
});

test('quota made unlimited or raised, expiry removed or extended, group moved', () => {
  expect(w({ unlimitedQuota: true })).toEqual(['quota: unlimited']);
  expect(w({ remainQuota: 5000 })).toEqual(['quota: raised from 1000 to 5000']);
  expect(w({ expiresAt: null })).toEqual(['expiry removed (never expires)']);
  expect(w({ expiresAt: 2_100_000_000 })).toEqual(['expiry extended to 2036-07-18T13:20:00Z']);
  expect(w({ group: 'vip' })).toEqual(['group: now "vip" instead of "default"']);
  expect(w({ group: null }, { group: 'vip' })).toEqual(['group: now "default" (the owner\'s) instead of "vip"']);
});

test('rate limits raised or lifted; per-model limits loosened, dropped or overridden by a looser, more specific pattern', () => {
  expect(w({ rateLimitRpm: 0, maxConcurrency: 8 })).toEqual(['requests per minute: unlimited instead of 60', 'concurrency: 8 instead of 4']);
  expect(w({ modelLimits: null })).toEqual(['per-model limits loosened for "claude-*"']);
  expect(w({ modelLimits: { 'claude-*': { rateLimitRpm: 10, rateLimitTpm: 0, maxConcurrency: 0 } } })).toEqual(['per-model limits loosened for "claude-*"']);
  expect(w({ modelLimits: { ...base.modelLimits, 'claude-opus': { rateLimitRpm: 100, rateLimitTpm: 0, maxConcurrency: 2 } } })).toEqual(['per-model limits loosened for "claude-opus"']);
  expect(w({ modelLimits: { ...base.modelLimits, 'claude-3-*': { rateLimitRpm: 10, rateLimitTpm: 0, maxConcurrency: 3 } } })).toEqual(['per-model limits loosened for "claude-3-*"']);
  // A dropped pattern whose models fall to an equally strict one is no loosening.
  const both = { 'claude-*': { rateLimitRpm: 10, rateLimitTpm: 0, maxConcurrency: 2 }, 'claude-3-*': { rateLimitRpm: 20, rateLimitTpm: 0, maxConcurrency: 2 } };
  expect(w({ modelLimits: { 'claude-*': both['claude-*'] } }, { modelLimits: both })).toEqual([]);
  expect(w({ modelLimits: { 'claude-3-*': both['claude-3-*'] } }, { modelLimits: both })).toEqual(['per-model limits loosened for "claude-*"']);
});

test('every widening at once is listed in field order', () => {
  expect(w({ allowIps: null, models: null, unlimitedQuota: true, expiresAt: null, group: 'vip' })).toEqual([
    'IP allow-list removed (any address)', 'models: now any', 'quota: unlimited', 'expiry removed (never expires)', 'group: now "vip" instead of "default"',
  ]);
});

test('everything widened at once with the longest values allowed stays one line under the notice\'s detail bound', () => {
  const long = (c: string, n: number) => c.repeat(n);
  const before: KeyTerms = { ...base, remainQuota: 1, group: long('a', 64), modelLimits: Object.fromEntries(['p', 'q', 'r', 's'].map((c) => [`${long(c, 198)}*`, { rateLimitRpm: 1, rateLimitTpm: 1, maxConcurrency: 1 }])) };
  const after: KeyTerms = {
    expiresAt: 9_999_999_999, unlimitedQuota: false, remainQuota: 1e15, allowIps: Array.from({ length: 256 }, (_, i) => `2001:db8:${i.toString(16)}:ffff:ffff:ffff:ffff:0/127`),
    models: Array.from({ length: 1000 }, (_, i) => `${long('m', 190)}${i}`), group: long('b', 64), rateLimitRpm: 0, rateLimitTpm: 0, maxConcurrency: 0, modelLimits: null,
  };
  const text = [`"${long('n', 100)}" (id 123456789)`, ...keyWidening(before, after, long('c', 64))].join('; ');
  expect(text.length).toBeLessThan(1_600);
  expect(text).toContain('per-model limits loosened');
});

test('added addresses are listed widest first, so decoys written before 0.0.0.0/0 cannot leave it uncounted by name', () => {
  const decoys = ['192.0.2.1', '192.0.2.2', '192.0.2.3'];
  expect(w({ allowIps: ['10.1.0.0/16', ...decoys, '0.0.0.0/0'] })).toEqual(['IP allow-list: now also 0.0.0.0/0, 192.0.2.1, 192.0.2.2 and 1 more']);
  expect(w({ allowIps: [...decoys, '2001:db8::/32', '11.0.0.0/8'] })).toEqual(['IP allow-list: now also 2001:db8::/32, 11.0.0.0/8, 192.0.2.1 and 2 more']);
});

test('an expiry past what a date can show is named as unix time instead of throwing', () => {
  expect(w({ expiresAt: 9_000_000_000_000 })).toEqual(['expiry extended to unix time 9000000000000']);
  expect(w({ expiresAt: 253_402_300_799 })).toEqual(['expiry extended to 9999-12-31T23:59:59Z']);
});
