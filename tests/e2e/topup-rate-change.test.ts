/**
 * An operator changes QUOTA_PER_UNIT while orders are pending: each order credits the quota it promised when it was
 * created (its `credit`, shown in the create answer), with either provider, and its refunds take back shares of that
 * credit. Orders created after the restart promise the new rate.
 */
import { afterAll, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ON_PG } from '../helpers/gateway';
import { dropSchema, freshSchema, PG_TEST_URL } from '../helpers/postgres';
import { freshPrefix, REDIS_TEST_URL } from '../helpers/redis';
import { startPayments } from './payment-webhooks-setup';

const dir = mkdtempSync(join(tmpdir(), 'gw-rate-'));
const schema = freshSchema('gw_rate');
const db: Record<string, string> = ON_PG
  ? { DATABASE_URL: PG_TEST_URL, PG_SCHEMA: schema, REDIS_URL: REDIS_TEST_URL, REDIS_PREFIX: freshPrefix('rate'), SECRET_KEY: 'cd'.repeat(32) }
  : { DATABASE_URL: `sqlite:${join(dir, 'gateway.db')}` };

afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  if (ON_PG) await dropSchema(schema);
});

const paid = { status: 'complete' as const, payment_status: 'paid' as const };

test('pending orders of both providers credit the QUOTA_PER_UNIT they were created with, not the one at payment', async () => {
  const before = await startPayments({ ...db, QUOTA_PER_UNIT: '10' });
  let a, b, paidA: string, paidB: string, refundA: string;
  try {
    a = await before.orderA(500);
    b = await before.orderB(500);
    for (const o of [a, b]) expect((await before.orderView(o.tradeNo, o.user.token)).credit).toBe(5000);
    paidA = before.stripe.event('checkout.session.completed', a.session, paid);
    paidB = before.creem.completedEvent(b.checkout);
    refundA = before.stripe.refundEvent(a.session, [250]);
  } finally {
    await before.stop();
  }
  const after = await startPayments({ ...db, QUOTA_PER_UNIT: '30' });
  try {
    expect((await after.postA(paidA)).outcome).toBe('credited');
    expect((await after.postB(paidB)).outcome).toBe('credited');
    expect(await after.balance(a.user.token)).toBe(5000);
    expect(await after.balance(b.user.token)).toBe(5000);
    // Half refunded: half of the credit the order promised.
    expect((await after.postA(refundA)).outcome).toBe('refunded');
    expect(await after.balance(a.user.token)).toBe(2500);
    for (const o of [a, b]) await after.balanced(o.user.id, o.tradeNo);
    // A new order promises, and credits, the new rate.
    const c = await after.orderB(500);
    expect((await after.orderView(c.tradeNo, c.user.token)).credit).toBe(15000);
    expect((await after.postB(after.creem.completedEvent(c.checkout))).outcome).toBe('credited');
    expect(await after.balance(c.user.token)).toBe(15000);
    await after.balanced(c.user.id, c.tradeNo);
  } finally {
    await after.stop();
  }
}, 60_000);
