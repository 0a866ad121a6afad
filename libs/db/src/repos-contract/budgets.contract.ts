import { describe, expect, test } from 'bun:test';
import { causeChain } from '@gw/core';
import type { MakeEnv } from './env';
import { BIG, seedKey, seedUser, useEnv } from './setup';

const budget = (over: { scope?: string; subjectId: number; period?: string; limitAmount?: number }) => ({
  scope: 'user', period: 'monthly', limitAmount: 1_000, createdAt: 1, updatedAt: 1, ...over,
});
/** A write the database refused because its subject does not exist (drizzle wraps PostgreSQL's error as the cause). */
const refusedGone = async (write: () => unknown) => {
  const err = await (async () => write())().then(() => null, (e: unknown) => e);
  expect(causeChain(err).some((e) => String(e?.message).includes('budget_subject_gone'))).toBe(true);
};
const alert = (eventId: string, nextAttemptAt: number, status: 'pending' | 'skipped' = 'pending') =>
  ({ eventId, type: 'budget.threshold', payload: `{"id":"${eventId}"}`, status, nextAttemptAt, createdAt: 1 });

/** Budgets and low-balance thresholds, the budget writes of a settlement, the alert outbox. */
export function budgetsContract(make: MakeEnv): void {
  describe('budgets', () => {
    const env = useEnv(make);

    test('insert with defaults, find by (scope, subject, period), list filters, update, delete; one budget per (scope, subject, period)', async () => {
      const { repos: r } = env();
      const { budgets } = r;
      const u7 = (await seedUser(r)).id;
      const u8 = (await seedUser(r)).id;
      const k7 = (await seedKey(r, u7)).id;
      const a = await budgets.insert(budget({ subjectId: u7, limitAmount: BIG }));
      expect(a).toMatchObject({ scope: 'user', subjectId: u7, period: 'monthly', limitAmount: BIG, periodKey: '', spent: 0, alerted: 0 });
      const b = await budgets.insert(budget({ scope: 'key', subjectId: k7, period: 'daily' }));
      const c = await budgets.insert(budget({ subjectId: u8 }));
      await expect((async () => budgets.insert(budget({ subjectId: u7 })))()).rejects.toThrow();
      expect(await budgets.insertIfAbsent(budget({ subjectId: u7 }))).toBeUndefined();
      expect(await budgets.find('user', u7, 'monthly')).toEqual(a);
      expect(await budgets.find('user', u7, 'daily')).toBeUndefined();
      const d = await budgets.insertIfAbsent(budget({ subjectId: u7, period: 'daily' }));
      expect(d).toMatchObject({ scope: 'user', subjectId: u7, period: 'daily' });
      expect(await budgets.delete(d!.id)).toBeTruthy();
      expect((await budgets.all()).map((x) => x.id)).toEqual([a.id, b.id, c.id]);
      expect((await budgets.list({ scope: 'user' })).map((x) => x.id)).toEqual([a.id, c.id]);
      expect((await budgets.list({ subjectIds: [u7, k7] })).map((x) => x.id)).toEqual([a, b, c].filter((x) => x.subjectId === u7 || x.subjectId === k7).map((x) => x.id));
      expect(await budgets.list({ subjectIds: [] })).toEqual([]);
      expect(await budgets.update(a.id, { limitAmount: 5, updatedAt: 2 })).toMatchObject({ id: a.id, limitAmount: 5, updatedAt: 2 });
      expect(await budgets.update(a.id + 100, { limitAmount: 5 })).toBeUndefined();
      expect((await budgets.delete(b.id))?.id).toBe(b.id);
      expect(await budgets.delete(b.id)).toBeUndefined();
      expect(await budgets.byId(b.id)).toBeUndefined();
    });

    test('no budget or low-balance threshold for a subject that does not exist, and a deleted one takes its own along', async () => {
      const { repos: r } = env();
      const u = await seedUser(r);
      const k = await seedKey(r, u.id);
      await refusedGone(() => r.budgets.insert(budget({ subjectId: u.id + 1_000 })));
      await refusedGone(() => r.budgets.insertIfAbsent(budget({ scope: 'key', subjectId: k.id + 1_000 })));
      await refusedGone(() => r.budgets.setLowBalance(u.id + 1_000, 5, 1));
      const kb = await r.budgets.insert(budget({ scope: 'key', subjectId: k.id }));
      const ub = await r.budgets.insert(budget({ subjectId: u.id }));
      await r.budgets.setLowBalance(u.id, 5, 1);
      await r.apiKeys.delete(k.id);
      expect((await r.budgets.all()).map((x) => x.id)).toEqual([ub.id]);
      expect(await r.budgets.byId(kb.id)).toBeUndefined();
      await r.users.delete(u.id);
      expect(await r.budgets.all()).toEqual([]);
      expect(await r.budgets.lowBalanceAll()).toEqual([]);
    });

    test('updateFrom writes only while the limit and the spend are still the ones expected (compare-and-set)', async () => {
      const { repos: r } = env();
      const { budgetCharges } = r;
      const { budgets } = r;
      const a = await budgets.insert(budget({ scope: 'key', subjectId: (await seedKey(r, (await seedUser(r)).id)).id, limitAmount: BIG }));
      const seen = { limitAmount: BIG, spent: a.spent, periodKey: a.periodKey };
      expect(await budgets.updateFrom(a.id, { ...seen, limitAmount: 10 }, { limitAmount: 1, alerted: 0, updatedAt: 2 })).toBeUndefined();
      expect(await budgets.updateFrom(a.id, seen, { limitAmount: 10, alerted: 0, updatedAt: 2 })).toMatchObject({ id: a.id, limitAmount: 10 });
      expect(await budgets.updateFrom(a.id, seen, { limitAmount: BIG, alerted: 0, updatedAt: 3 })).toBeUndefined();
      expect((await budgets.byId(a.id))!.limitAmount).toBe(10);
      // A charge committed since the read (it may have marked a threshold) fails the write too.
      const charged = (await budgetCharges.charge(a.id, '2026-01-31', 5))!;
      expect(await budgets.updateFrom(a.id, { ...seen, limitAmount: 10 }, { limitAmount: 20, alerted: 0, updatedAt: 4 })).toBeUndefined();
      expect(await budgets.updateFrom(a.id, { limitAmount: 10, spent: charged.spent, periodKey: charged.periodKey }, { limitAmount: 20, alerted: 0, updatedAt: 4 }))
        .toMatchObject({ limitAmount: 20 });
    });

    test('low-balance thresholds: set is an upsert per user; clear says whether one existed', async () => {
      const { repos: r } = env();
      const u = await seedUser(r);
      await r.budgets.setLowBalance(u.id, 100, 10);
      await r.budgets.setLowBalance(u.id, BIG, 20);
      expect(await r.budgets.lowBalance(u.id)).toMatchObject({ userId: u.id, threshold: BIG, createdAt: 10, updatedAt: 20 });
      expect(await r.budgets.lowBalanceAll()).toHaveLength(1);
      expect(await r.budgets.clearLowBalance(u.id)).toBe(true);
      expect(await r.budgets.clearLowBalance(u.id)).toBe(false);
      expect(await r.budgets.lowBalance(u.id)).toBeUndefined();
    });

    test('charge adds within a period, restarts in a later one (alerts too), counts a late one in the later period, ignores a missing budget', async () => {
      const { budgets, budgetCharges } = env().repos;
      const b = await budgets.insert(budget({ subjectId: (await seedUser(env().repos)).id, period: 'daily' }));
      expect(await budgetCharges.charge(b.id, '2026-01-31', 40)).toEqual({ spent: 40, alerted: 0, limitAmount: 1_000, periodKey: '2026-01-31' });
      await budgetCharges.markAlerted(b.id, 3);
      expect(await budgetCharges.charge(b.id, '2026-01-31', 2)).toEqual({ spent: 42, alerted: 3, limitAmount: 1_000, periodKey: '2026-01-31' });
      // A late charge of an earlier period never rewinds the current one, and counts in it (the earlier one's spend is gone).
      expect(await budgetCharges.charge(b.id, '2026-01-30', 500)).toEqual({ spent: 542, alerted: 3, limitAmount: 1_000, periodKey: '2026-01-31' });
      expect(await budgetCharges.charge(b.id, '2026-02-01', BIG)).toEqual({ spent: BIG, alerted: 0, limitAmount: 1_000, periodKey: '2026-02-01' });
      expect(await budgets.byId(b.id)).toMatchObject({ spent: BIG, alerted: 0, periodKey: '2026-02-01' });
      expect(await budgetCharges.charge(b.id + 100, '2026-02-01', 1)).toBeNull();
    });

    test('countAlert counts per cap and period, restarts in a later one, counts a late one in the later period', async () => {
      const { budgetCharges } = env().repos;
      expect(await budgetCharges.countAlert('low:1:daily', '2026-01-31', 10)).toBe(1);
      expect(await budgetCharges.countAlert('low:1:daily', '2026-01-31', 10)).toBe(2);
      expect(await budgetCharges.countAlert('low:2:daily', '2026-01-31', 10)).toBe(1);
      expect(await budgetCharges.countAlert('low:1:daily', '2026-02-01', 20)).toBe(1);
      expect(await budgetCharges.countAlert('low:1:daily', '2026-01-31', 10)).toBe(2);
    });

    test('spent stops at 2^53 − 1 like used_quota (and a new period starts below it again)', async () => {
      const { budgets, budgetCharges } = env().repos;
      const b = await budgets.insert(budget({ subjectId: (await seedUser(env().repos)).id, period: 'daily' }));
      const top = Number.MAX_SAFE_INTEGER;
      expect((await budgetCharges.charge(b.id, '2026-01-31', top - 5))!.spent).toBe(top - 5);
      expect((await budgetCharges.charge(b.id, '2026-01-31', 10))!.spent).toBe(top);
      expect((await budgetCharges.charge(b.id, '2026-01-31', top))!.spent).toBe(top);
      expect(await budgets.byId(b.id)).toMatchObject({ spent: top });
      expect((await budgetCharges.charge(b.id, '2026-02-01', 7))!.spent).toBe(7);
    });
  });

  describe('alert outbox', () => {
    const env = useEnv(make);

    test('enqueue, due oldest first, claim once per seen attempt, delivered / retry / failed, list by status', async () => {
      const { budgetCharges, alertOutbox } = env().repos;
      await budgetCharges.enqueue(alert('e1', 200));
      await budgetCharges.enqueue(alert('e2', 100));
      await budgetCharges.enqueue(alert('e3', 100, 'skipped'));
      await budgetCharges.enqueue(alert('e4', 900));
      await expect((async () => budgetCharges.enqueue(alert('e1', 1)))()).rejects.toThrow();
      const due = await alertOutbox.due(500, 10);
      expect(due.map((a) => a.eventId)).toEqual(['e2', 'e1']);
      expect(due[0]).toMatchObject({ status: 'pending', attempts: 0, lastError: '', deliveredAt: null, payload: '{"id":"e2"}' });
      expect(await alertOutbox.due(500, 1)).toHaveLength(1);
      const [e2, e1] = due;
      expect(await alertOutbox.claim(e2!.id, 100, 600)).toBe(true);
      expect(await alertOutbox.claim(e2!.id, 100, 600)).toBe(false);
      await alertOutbox.delivered(e2!.id, 1, 550);
      expect(await alertOutbox.claim(e2!.id, 600, 700)).toBe(false);
      await alertOutbox.retry(e1!.id, 1, 800, 'HTTP 500');
      expect((await alertOutbox.due(500, 10)).map((a) => a.eventId)).toEqual([]);
      expect((await alertOutbox.due(800, 10)).map((a) => [a.eventId, a.attempts, a.lastError])).toEqual([['e1', 1, 'HTTP 500']]);
      await alertOutbox.failed(e1!.id, 2, 'gave up');
      const delivered = await alertOutbox.list({ status: 'delivered', offset: 0, limit: 10 });
      expect(delivered.items.map((a) => [a.eventId, a.attempts, a.deliveredAt])).toEqual([['e2', 1, 550]]);
      expect(delivered.total).toBe(1);
      expect((await alertOutbox.list({ status: 'failed', offset: 0, limit: 10 })).items.map((a) => a.lastError)).toEqual(['gave up']);
      const all = await alertOutbox.list({ offset: 1, limit: 2 });
      expect([all.total, all.items.map((a) => a.eventId)]).toEqual([4, ['e3', 'e2']]);
    });
  });
}
