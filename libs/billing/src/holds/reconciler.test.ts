/**
 * The leader's reconciler: lapsed holds are released against the ledger, and the mirrors of users
 * admitting now are brought up to the ledger's versions, so a balance move whose mirror update was
 * lost (Redis answered an error, or the writer died between its commit and the update) cannot keep
 * an old, higher balance admitting on every node until that user's next charge.
 */
import { describe, expect, test } from 'bun:test';
import type { Logger } from '@gw/core';
import type { SettlementRow } from '@gw/db';
import { MemoryHoldStore } from './memory';
import type { Mirror } from './port';
import { HoldReconciler, type LedgerTruth, type UnfinishedBilling } from './reconciler';

class Ledger implements LedgerTruth {
  user: Mirror = { balance: 1_000, version: 1 };
  key: Mirror = { balance: 600, version: 1 };
  settledRefs = new Set<string>();
  async settled(ref: string) { return this.settledRefs.has(ref); }
  async mirrors() { return { user: { ...this.user }, key: { ...this.key } }; }
  async accounts(userIds: number[]) {
    return userIds.filter((u) => u === 1).map((userId) => ({ userId, user: { ...this.user }, keys: [{ keyId: 7, mirror: { ...this.key } }] }));
  }
}

function setup() {
  let now = 0;
  const ledger = new Ledger();
  const store = new MemoryHoldStore(async () => ({ user: { ...ledger.user }, key: { ...ledger.key } }), () => now);
  const rec = new HoldReconciler(store, ledger, { intervalMs: 1_000 });
  return { ledger, store, rec, at: (t: number) => { now = t; } };
}

describe('HoldReconciler', () => {
  test('a lapsed hold is released with the ledger balances; a live one stays', async () => {
    const { ledger, store, rec, at } = setup();
    await store.reserve({ userId: 1, keyId: 7, amount: 100, ref: 'dead', leaseMs: 1_000 });
    await store.reserve({ userId: 1, keyId: 7, amount: 50, ref: 'live', leaseMs: 10_000 });
    // The dead node's request was committed before it died: 80 charged.
    ledger.settledRefs.add('dead');
    ledger.user = { balance: 920, version: 2 };
    ledger.key = { balance: 520, version: 2 };
    at(2_000);
    expect(await rec.runOnce()).toBe(1);
    expect(await store.available({ userId: 1, keyId: 7 })).toEqual({ user: 920 - 50, key: 520 - 50 });
  });

  test('a balance lowered in the ledger whose mirror update was lost: the next pass installs it for users with holds', async () => {
    const { ledger, store, rec } = setup();
    await store.reserve({ userId: 1, keyId: 7, amount: 100, ref: 'a', leaseMs: 10_000 });
    // An administrator took the balance to 150 and the key to 120; the follow-up write to the store failed.
    ledger.user = { balance: 150, version: 2 };
    ledger.key = { balance: 120, version: 5 };
    expect(await store.available({ userId: 1, keyId: 7 })).toEqual({ user: 900, key: 500 });
    await rec.runOnce();
    expect(await store.available({ userId: 1, keyId: 7 })).toEqual({ user: 50, key: 20 });
    const more = await store.reserve({ userId: 1, keyId: 7, amount: 100, ref: 'b', leaseMs: 10_000 });
    expect(more).toMatchObject({ ok: false, reason: 'short', scope: 'user', available: 50 });
    // Only ever a newer version: an older ledger read does not move the mirror back.
    ledger.user = { balance: 5_000, version: 1 };
    await rec.runOnce();
    expect((await store.available({ userId: 1 })).user).toBe(50);
  });
});

/**
 * Realtime responses a dead node was running: their checkpoints (kept under the hold's ref) are billed once its hold
 * lapsed, capped by it, before the release, so the release installs a balance with the charge in it.
 */
describe('HoldReconciler: checkpoints of a dead node', () => {
  const row = (requestId: string, cost: number, usageFlag = 'estimated'): SettlementRow => ({
    requestId, kind: 'realtime', userId: 1, apiKeyId: 7, channelId: null, model: 'm', upstreamModel: 'm', stream: true, inputTokens: 1, outputTokens: 1,
    cacheReadTokens: 0, cacheWriteTokens: 0, cacheWrite1hTokens: 0, longContext: false, audioInputTokens: 0, audioOutputTokens: 0, webSearchRequests: 0,
    codeExecutionRequests: 0, cost, latencyMs: 0, ttftMs: null, status: 200, errorCode: 'gateway_crashed', usageFlag, attempts: 1, ip: '', createdAt: 1,
    group: '', priceRatio: 1000, billedModel: '', overrides: '',
  });

  function withCheckpoints(opts: { fail?: (row: SettlementRow) => unknown } = {}) {
    let now = 0;
    const ledger = new Ledger();
    const kept = new Map<string, { ref: string; row: SettlementRow | null }>();
    const written: SettlementRow[] = [];
    const events: string[] = [];
    const billing: UnfinishedBilling = {
      rows: {
        heldBy: async (ref) => [...kept].filter(([, v]) => v.ref === ref).map(([requestId, v]) => ({ requestId, row: v.row })),
        remove: async (id) => { kept.delete(id); },
        settledCost: async (ids) => written.filter((r) => ids.includes(r.requestId)).reduce((a, r) => a + r.cost, 0),
        sweepSettled: async () => {
          // As PostgreSQL's: not while a checkpoint of the same hold is unsettled.
          const open = new Set([...kept].filter(([id]) => !ledger.settledRefs.has(id)).map(([, v]) => v.ref));
          let n = 0;
          for (const [id, v] of [...kept]) if (ledger.settledRefs.has(id) && !open.has(v.ref) && kept.delete(id)) n++;
          return n;
        },
      },
      settle: async (r) => {
        const err = opts.fail?.(r);
        if (err) throw err;
        if (ledger.settledRefs.has(r.requestId)) return { inserted: false };
        ledger.settledRefs.add(r.requestId);
        written.push(r);
        ledger.user = { balance: ledger.user.balance - r.cost, version: ledger.user.version + 1 };
        return { inserted: true };
      },
    };
    const store = new MemoryHoldStore(async () => ({ user: { ...ledger.user }, key: { ...ledger.key } }), () => now);
    const log = { info: (e: string) => events.push(e), warn: (e: string) => events.push(e), error: (e: string) => events.push(e) } as unknown as Logger;
    const rec = new HoldReconciler(store, ledger, { intervalMs: 1_000, unfinished: billing, log });
    return { ledger, store, rec, kept, written, events, billing, at: (t: number) => { now = t; } };
  }

  test('billed once after the lapse, capped by the hold, before the release; a live hold\'s checkpoint is not billed', async () => {
    const { ledger, store, rec, kept, written, at } = withCheckpoints();
    await store.reserve({ userId: 1, keyId: null, amount: 300, ref: 'rt_a#1', leaseMs: 1_000 });
    await store.reserve({ userId: 1, keyId: null, amount: 100, ref: 'rt_a#2', leaseMs: 1_000 });
    await store.reserve({ userId: 1, keyId: null, amount: 50, ref: 'rt_live#1', leaseMs: 10_000 });
    kept.set('rt_a_resp_1', { ref: 'rt_a#1', row: row('rt_a_resp_1', 120) });
    kept.set('rt_a_resp_2', { ref: 'rt_a#2', row: row('rt_a_resp_2', 400) });
    kept.set('rt_live_resp_1', { ref: 'rt_live#1', row: row('rt_live_resp_1', 30) });
    // Before the lease lapsed: nothing billed, nothing released.
    expect(await rec.runOnce()).toBe(0);
    expect(written).toEqual([]);
    at(2_000);
    expect(await rec.runOnce()).toBe(2);
    expect(written.map((r) => [r.requestId, r.cost, r.usageFlag, r.errorCode])).toEqual([
      ['rt_a_resp_1', 120, 'estimated', 'gateway_crashed'],
      ['rt_a_resp_2', 100, 'estimated,capped', 'gateway_crashed'],
    ]);
    expect([...kept.keys()]).toEqual(['rt_live_resp_1']);
    // The releases installed the balance after both charges: 1000 − 220, less the live hold.
    expect(ledger.user.balance).toBe(780);
    expect((await store.available({ userId: 1 })).user).toBe(780 - 50);
    // Nothing more on later passes.
    expect(await rec.runOnce()).toBe(0);
    expect(written).toHaveLength(2);
  });

  test('a checkpoint whose request was settled before the node died is deleted, not billed again; so is one swept without a hold', async () => {
    const { ledger, store, rec, kept, written, events, at } = withCheckpoints();
    await store.reserve({ userId: 1, keyId: null, amount: 300, ref: 'rt_b#1', leaseMs: 1_000 });
    ledger.settledRefs.add('rt_b_resp_1');
    ledger.settledRefs.add('rt_c_resp_1');
    kept.set('rt_b_resp_1', { ref: 'rt_b#1', row: row('rt_b_resp_1', 120) });
    // Its hold was released after the commit, its row's delete lost: only the sweep sees it.
    kept.set('rt_c_resp_1', { ref: 'rt_c#1', row: row('rt_c_resp_1', 80) });
    at(2_000);
    expect(await rec.runOnce()).toBe(1);
    expect(written).toEqual([]);
    expect(kept.size).toBe(0);
    expect(events).toContain('settlement.unfinished_swept');
  });

  test('the database unreachable: the hold stays in limbo, billed at a later pass; a row-level failure is logged and the hold released', async () => {
    let down = true;
    const bad = new Error('Failed query', { cause: Object.assign(new Error('insert violates foreign key'), { name: 'PostgresError', code: '23503' }) });
    const { store, rec, kept, written, events, at } = withCheckpoints({
      fail: (r) => (r.requestId === 'rt_d_resp_1' && down ? Object.assign(new Error('unreachable'), { code: 'settlement_unavailable' }) : r.requestId === 'rt_e_resp_1' ? bad : null),
    });
    await store.reserve({ userId: 1, keyId: null, amount: 300, ref: 'rt_d#1', leaseMs: 1_000 });
    await store.reserve({ userId: 1, keyId: null, amount: 300, ref: 'rt_e#1', leaseMs: 1_000 });
    kept.set('rt_d_resp_1', { ref: 'rt_d#1', row: row('rt_d_resp_1', 10) });
    kept.set('rt_e_resp_1', { ref: 'rt_e#1', row: row('rt_e_resp_1', 10) });
    at(2_000);
    expect(await rec.runOnce()).toBe(1);
    expect(events).toContain('settlement.unfinished_failed');
    expect([...kept.keys()]).toEqual(['rt_d_resp_1']);
    expect((await store.available({ userId: 1 })).user).toBe(1_000 - 300);
    down = false;
    expect(await rec.runOnce()).toBe(1);
    expect(written.map((r) => r.requestId)).toEqual(['rt_d_resp_1']);
    expect(kept.size).toBe(0);
  });

  test('the settlement path closing under a shutdown (a plain error, no code) keeps the row and its hold for the next pass', async () => {
    let closing = true;
    const { store, rec, kept, written, events, at } = withCheckpoints({
      fail: () => (closing ? new Error('group committer closed') : null),
    });
    await store.reserve({ userId: 1, keyId: null, amount: 300, ref: 'rt_f#1', leaseMs: 1_000 });
    kept.set('rt_f_resp_1', { ref: 'rt_f#1', row: row('rt_f_resp_1', 10) });
    at(2_000);
    expect(await rec.runOnce()).toBe(0);
    expect(events).not.toContain('settlement.unfinished_failed');
    expect([...kept.keys()]).toEqual(['rt_f_resp_1']);
    expect((await store.available({ userId: 1 })).user).toBe(1_000 - 300);
    closing = false;
    expect(await rec.runOnce()).toBe(1);
    expect(written.map((r) => r.requestId)).toEqual(['rt_f_resp_1']);
    expect(kept.size).toBe(0);
  });

  test('a pass cut short between two checkpoints (the database failing on the second): the next pass bills up to the hold, not past it', async () => {
    let down = true;
    const { ledger, store, rec, kept, written, at } = withCheckpoints({
      fail: (r) => (r.requestId === 'rt_g_resp_2' && down ? Object.assign(new Error('unreachable'), { code: 'settlement_unavailable' }) : null),
    });
    await store.reserve({ userId: 1, keyId: null, amount: 300, ref: 'rt_g#1', leaseMs: 1_000 });
    kept.set('rt_g_resp_1', { ref: 'rt_g#1', row: row('rt_g_resp_1', 200) });
    kept.set('rt_g_resp_2', { ref: 'rt_g#1', row: row('rt_g_resp_2', 200) });
    at(2_000);
    expect(await rec.runOnce()).toBe(0);
    expect(written.map((r) => r.cost)).toEqual([200]);
    down = false;
    expect(await rec.runOnce()).toBe(1);
    expect(written.map((r) => [r.requestId, r.cost])).toEqual([['rt_g_resp_1', 200], ['rt_g_resp_2', 100]]);
    expect(ledger.user.balance).toBe(1_000 - 300);
    expect(kept.size).toBe(0);
    expect((await store.available({ userId: 1 })).user).toBe(700);
  });

  test('a checkpoint its node settled before dying counts against the hold: the rest is capped at what is left', async () => {
    const { ledger, store, rec, written, kept, billing, at } = withCheckpoints();
    await store.reserve({ userId: 1, keyId: null, amount: 300, ref: 'rt_h#1', leaseMs: 1_000 });
    kept.set('rt_h_resp_1', { ref: 'rt_h#1', row: row('rt_h_resp_1', 200) });
    kept.set('rt_h_resp_2', { ref: 'rt_h#1', row: row('rt_h_resp_2', 200) });
    // The node's own settlement of the first committed; it died before deleting the checkpoint.
    await billing.settle(row('rt_h_resp_1', 200));
    at(2_000);
    expect(await rec.runOnce()).toBe(1);
    expect(written.map((r) => [r.requestId, r.cost])).toEqual([['rt_h_resp_1', 200], ['rt_h_resp_2', 100]]);
    expect(ledger.user.balance).toBe(1_000 - 300);
  });
});
