import { describe, expect, test } from 'bun:test';
import { GatewayError, MemoryRateLimits } from '@gw/core';
import { RequestLimiter, modelLimitFor, type LimitFields } from './limits';

const none: LimitFields = { rateLimitRpm: 0, rateLimitTpm: 0, maxConcurrency: 0 };
const subject = (key: Partial<LimitFields>, user: Partial<LimitFields> = {}, group: Partial<LimitFields> = {}) =>
  ({ key: { ...none, ...key, id: 1 }, user: { ...none, ...user, id: 2 }, group: { ...none, ...group, name: 'g' } });

/**
 * Windows are aligned to the clock's minutes: a burst that straddles one weighs its first hits a little less than
 * whole after it, and one more passes. The counting tests run on a clock fixed mid-minute, so none can.
 */
const midMinute = () => 1_800_000_030_000;

async function refusal(p: Promise<unknown>): Promise<GatewayError> {
  try { await p; } catch (e) { return e as GatewayError; }
  throw new Error('expected a refusal');
}

describe('RequestLimiter', () => {
  test('a request refused by a later limit gives back the concurrency slots it took', async () => {
    const limits = new MemoryRateLimits(midMinute);
    const lim = new RequestLimiter(limits, { leaseMs: 60_000 });
    const s = subject({ maxConcurrency: 5 }, { rateLimitRpm: 1 });
    const first = await lim.admit(s, { tokens: 0, hold: true });
    const e = await refusal(lim.admit(s, { tokens: 0, hold: true }));
    expect([e.status, e.code]).toEqual([429, 'user_rpm_exceeded']);
    expect(Number(e.headers['retry-after'])).toBeGreaterThan(0);
    expect(await limits.active('lim:cc:k:1')).toBe(1);
    first.release();
    first.release();
    expect(await limits.active('lim:cc:k:1')).toBe(0);
  });

  test('tokens per minute count the admitted tokens; a request larger than the limit is refused without retry-after', async () => {
    const lim = new RequestLimiter(new MemoryRateLimits(midMinute), { leaseMs: 60_000 });
    const s = subject({}, {}, { rateLimitTpm: 1000 });
    await lim.admit(s, { tokens: 600, hold: false });
    const e = await refusal(lim.admit(s, { tokens: 600, hold: false }));
    expect(e.code).toBe('group_tpm_exceeded');
    expect(e.headers['retry-after']).toBeDefined();
    const big = await refusal(lim.admit(s, { tokens: 1001, hold: false }));
    expect(big.code).toBe('group_tpm_exceeded');
    expect(big.headers['retry-after']).toBeUndefined();
  });

  test('held slots are renewed, so a request longer than the lease keeps counting', async () => {
    const limits = new MemoryRateLimits();
    // Renewed every lease/3: a 60 ms lease lapsed whenever a renewal timer fired 40 ms late (a loaded machine, a GC
    // pause). 300 ms leaves 200 ms of such lateness, and the sleep still spans three leases.
    const lim = new RequestLimiter(limits, { leaseMs: 300 });
    const s = subject({ maxConcurrency: 1 });
    const a = await lim.admit(s, { tokens: 0, hold: true });
    await Bun.sleep(1000);
    expect((await refusal(lim.admit(s, { tokens: 0, hold: true }))).code).toBe('key_concurrency_exceeded');
    a.release();
    (await lim.admit(s, { tokens: 0, hold: true })).release();
  });
});

describe('per-model limits', () => {
  const lim5 = { rateLimitRpm: 0, rateLimitTpm: 0, maxConcurrency: 0 };
  test('the most specific pattern applies: exact name, else the longest prefix; own properties only', () => {
    const m = { 'claude-*': { ...lim5, rateLimitRpm: 1 }, 'claude-opus-*': { ...lim5, rateLimitRpm: 2 }, 'claude-opus-4': { ...lim5, rateLimitRpm: 3 } };
    expect(modelLimitFor(m, 'claude-opus-4')?.[0]).toBe('claude-opus-4');
    expect(modelLimitFor(m, 'claude-opus-4-1')?.[0]).toBe('claude-opus-*');
    expect(modelLimitFor(m, 'claude-haiku')?.[0]).toBe('claude-*');
    expect(modelLimitFor(m, 'gpt-4o')).toBeNull();
    expect(modelLimitFor(m, 'constructor')).toBeNull();
    expect(modelLimitFor(m, null)).toBeNull();
    expect(modelLimitFor({ '*': lim5 }, 'anything')?.[0]).toBe('*');
  });

  test('mapped names match too: the requested name\'s exact entry first, then a mapped exact one, else the longest prefix of any', () => {
    const m = { 'claude-*': { ...lim5, rateLimitRpm: 1 }, 'claude-opus-*': { ...lim5, rateLimitRpm: 2 }, fast: { ...lim5, rateLimitRpm: 3 }, 'claude-opus-4': { ...lim5, rateLimitRpm: 4 } };
    expect(modelLimitFor(m, 'fast', ['claude-opus-4'])?.[0]).toBe('fast');
    expect(modelLimitFor(m, 'quick', ['claude-opus-4'])?.[0]).toBe('claude-opus-4');
    expect(modelLimitFor(m, 'quick', ['claude-opus-4-1'])?.[0]).toBe('claude-opus-*');
    expect(modelLimitFor(m, 'claude-x', ['claude-opus-4-1'])?.[0]).toBe('claude-opus-*');
    expect(modelLimitFor(m, 'quick', ['gpt', 'constructor'])).toBeNull();
  });

  test('a model limit counts per pattern, apart from the general limit, and names itself in the refusal', async () => {
    const limits = new MemoryRateLimits(midMinute);
    const lim = new RequestLimiter(limits, { leaseMs: 60_000 });
    const s = subject({ rateLimitRpm: 10, modelLimits: { 'opus-*': { ...lim5, rateLimitRpm: 2 } } });
    await lim.admit(s, { tokens: 0, hold: false, model: 'opus-1' });
    await lim.admit(s, { tokens: 0, hold: false, model: 'opus-2' });
    const e = await refusal(lim.admit(s, { tokens: 0, hold: false, model: 'opus-1' }));
    expect([e.status, e.code, e.param]).toEqual([429, 'key_model_rpm_exceeded', 'model']);
    expect(e.message).toContain('opus-*');
    expect(Number(e.headers['retry-after'])).toBeGreaterThan(0);
    // Other models only see the general limit (10 per minute; 2 used so far: the refused one gave its unit back).
    for (let i = 0; i < 8; i++) await lim.admit(s, { tokens: 0, hold: false, model: 'haiku' });
    expect((await refusal(lim.admit(s, { tokens: 0, hold: false, model: 'haiku' }))).code).toBe('key_rpm_exceeded');
  });

  test('model concurrency and tokens per minute on user and group; refusals give back the slots taken', async () => {
    const limits = new MemoryRateLimits();
    const lim = new RequestLimiter(limits, { leaseMs: 60_000 });
    const s = subject({ maxConcurrency: 5 }, { modelLimits: { big: { ...lim5, maxConcurrency: 1 } } }, { modelLimits: { 'b*': { ...lim5, rateLimitTpm: 100 } } });
    const a = await lim.admit(s, { tokens: 10, hold: true, model: 'big' });
    expect((await refusal(lim.admit(s, { tokens: 10, hold: true, model: 'big' }))).code).toBe('user_model_concurrency_exceeded');
    expect(await limits.active('lim:cc:k:1')).toBe(1);
    a.release();
    expect((await refusal(lim.admit(s, { tokens: 95, hold: true, model: 'big' }))).code).toBe('group_model_tpm_exceeded');
    expect(await limits.active('lim:cc:u:2:m:big')).toBe(0);
    expect(await limits.active('lim:cc:k:1')).toBe(0);
  });

  test('limited() is false when no limit applies to the model, so admission is skipped', () => {
    const s = subject({ modelLimits: { 'opus-*': { ...lim5, rateLimitRpm: 2 } } });
    expect(RequestLimiter.limited(s, 'haiku')).toBe(false);
    expect(RequestLimiter.limited(s, 'opus-1')).toBe(true);
    expect(RequestLimiter.limited(subject({}), 'opus-1')).toBe(false);
  });
});
