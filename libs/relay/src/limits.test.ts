import { describe, expect, test } from 'bun:test';
import { GatewayError, MemoryRateLimits } from '@gw/core';
import { RequestLimiter, type LimitFields } from './limits';

const none: LimitFields = { rateLimitRpm: 0, rateLimitTpm: 0, maxConcurrency: 0 };
const subject = (key: Partial<LimitFields>, user: Partial<LimitFields> = {}, group: Partial<LimitFields> = {}) =>
  ({ key: { ...none, ...key, id: 1 }, user: { ...none, ...user, id: 2 }, group: { ...none, ...group, name: 'g' } });

async function refusal(p: Promise<unknown>): Promise<GatewayError> {
  try { await p; } catch (e) { return e as GatewayError; }
  throw new Error('expected a refusal');
}

describe('RequestLimiter', () => {
  test('a request refused by a later limit gives back the concurrency slots it took', async () => {
    const limits = new MemoryRateLimits();
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
    const lim = new RequestLimiter(new MemoryRateLimits(), { leaseMs: 60_000 });
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
    const lim = new RequestLimiter(limits, { leaseMs: 60 });
    const s = subject({ maxConcurrency: 1 });
    const a = await lim.admit(s, { tokens: 0, hold: true });
    await Bun.sleep(200);
    expect((await refusal(lim.admit(s, { tokens: 0, hold: true }))).code).toBe('key_concurrency_exceeded');
    a.release();
    (await lim.admit(s, { tokens: 0, hold: true })).release();
  });
});
