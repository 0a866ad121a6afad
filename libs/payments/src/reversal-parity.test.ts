/**
 * The same signed refund and dispute events, applied by the real WebhookService and providers to a SQLite store set
 * and to a PostgreSQL one, leave the same state: every outcome, the orders' clawed-back quota and paid amounts, each
 * topup_reversals row (key, state, amount, gross, as_of, since) and every ledger entry (kind, amount, ref, balance
 * after). Runs when PostgreSQL is reachable (else skipped with a line saying so).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { createHmac } from 'node:crypto';
import { ChangeBus } from '@gw/core';
import { createStores, openDatabase, type Stores, type TopupReversalRow } from '@gw/db';
import { createPgStores } from '@gw/db/pg/stores';
import { openPgTestDb, requirePg, type PgTestDb } from '../../../tests/helpers/postgres';
import { ProviderA } from './provider-a';
import { ProviderB } from './provider-b';
import type { PaymentProvider, ProviderId } from './provider';
import { WebhookService } from './webhook-service';

const available = await requirePg('libs/payments/src/reversal-parity.test.ts');
let pg: PgTestDb;
beforeAll(async () => { if (available) pg = await openPgTestDb('gw_reversal_parity'); });
afterAll(async () => { if (available) await pg?.close(); });

const A_SECRET = 'whsec_parity';
const B_SECRET = 'creem_parity';
const T0 = 1_800_000_000;

function signA(body: string): Headers {
  const t = Math.floor(Date.now() / 1000);
  return new Headers({ 'stripe-signature': `t=${t},v1=${createHmac('sha256', A_SECRET).update(`${t}.${body}`).digest('hex')}` });
}
const signB = (body: string) => new Headers({ 'creem-signature': createHmac('sha256', B_SECRET).update(body).digest('hex') });

let n = 0;
const stripeEvent = (type: string, object: Record<string, unknown>, created = T0) => JSON.stringify({ id: `evt_${++n}`, object: 'event', created, type, data: { object } });
const creemEvent = (eventType: string, object: Record<string, unknown>) => JSON.stringify({ id: `evt_b_${++n}`, eventType, object });

/** The event sequence: [provider, body]. Orders: tp_a (providerA, 500 usd paid as 460 eur), tp_b (providerB, 500 + 50 tax). */
function sequence(): Array<[ProviderId, string]> {
  const charge = (refunded: number, created: number, currency = 'usd') => stripeEvent('charge.refunded',
    { id: 'ch_a', object: 'charge', payment_intent: 'pi_a', amount_refunded: refunded, currency, metadata: {} }, created);
  const dispute = (type: string, id: string, amount: number, currency = 'usd') => stripeEvent(type,
    { id, object: 'dispute', payment_intent: 'pi_a', amount, currency, status: 'needs_response' });
  const refundB = (id: string, amount: number) => creemEvent('refund.created',
    { id, status: 'succeeded', refund_amount: amount, refund_currency: 'USD', checkout: { id: 'ch_b', request_id: 'tp_b' }, order: 'ord_b' });
  return [
    ['providerB', refundB('ref_early', 55)],
    ['providerA', stripeEvent('checkout.session.completed', {
      id: 'cs_a', client_reference_id: 'tp_a', payment_status: 'paid', payment_intent: 'pi_a', amount_total: 460, currency: 'eur',
      currency_conversion: { amount_total: 500, amount_subtotal: 500, fx_rate: '0.92', source_currency: 'usd' },
    })],
    ['providerB', creemEvent('checkout.completed', {
      id: 'ch_b', request_id: 'tp_b', product: 'prod_p',
      order: { id: 'ord_b', amount: 500, currency: 'USD', status: 'paid', product: 'prod_p', sub_total: 500, tax_amount: 50, amount_paid: 550 },
    })],
    ['providerA', charge(92, T0, 'eur')],
    ['providerA', charge(100, T0 + 10)],
    ['providerA', charge(92, T0, 'eur')],
    ['providerA', stripeEvent('charge.refund.updated',
      { id: 're_2', object: 'refund', amount: 50, charge: 'ch_a', payment_intent: 'pi_a', currency: 'usd', status: 'failed', created: T0 + 10 }, T0 + 20)],
    ['providerA', dispute('charge.dispute.funds_withdrawn', 'dp_1', 230, 'EUR')],
    ['providerA', dispute('charge.dispute.funds_withdrawn', 'dp_1', 460, 'eur')],
    ['providerA', dispute('charge.dispute.funds_reinstated', 'dp_1', 230, 'eur')],
    ['providerA', dispute('charge.dispute.funds_withdrawn', 'dp_2', 0)],
    ['providerA', dispute('charge.dispute.funds_withdrawn', 'dp_2', 1_000)],
    ['providerA', dispute('charge.dispute.funds_withdrawn', 'dp_3', 10, 'gbp')],
    ['providerB', refundB('ref_1', 110)],
    ['providerB', refundB('ref_1', 220)],
    ['providerB', refundB('ref_0', 0)],
    ['providerB', creemEvent('dispute.created', { id: 'disp_1', amount: 165, currency: 'USD', checkout: 'ch_b', order: 'ord_b' })],
  ];
}

async function run(s: Stores) {
  const providers = new Map<ProviderId, PaymentProvider>([
    ['providerA', new ProviderA({ apiBase: 'http://127.0.0.1:9', secretKey: 'sk', webhookSecret: A_SECRET, toleranceSeconds: 300 }, 1000)],
    ['providerB', new ProviderB({ apiBase: 'http://127.0.0.1:9', apiKey: 'k', webhookSecret: B_SECRET, productId: 'prod_p', unitAmount: 100 }, 1000)],
  ]);
  const service = new WebhookService(s.ledger, providers, new ChangeBus());
  const users: number[] = [];
  for (const [tradeNo, provider, providerRef] of [['tp_a', 'providerA', 'cs_a'], ['tp_b', 'providerB', 'ch_b']] as const) {
    const u = await s.ledger.createUserWithOpeningBalance({ username: `u_${tradeNo}`, passwordHash: 'x', createdAt: 1, updatedAt: 1 }, null);
    users.push(u.id);
    await s.topupOrders.insert({ tradeNo, userId: u.id, provider, amount: 500, currency: 'usd', credit: 5000, providerRef, createdAt: 1, updatedAt: 1 });
  }
  const outcomes: string[] = [];
  for (const [p, body] of sequence()) {
    const r = await service.handle(p, new TextEncoder().encode(body), p === 'providerA' ? signA(body) : signB(body));
    outcomes.push(r.outcome);
  }
  const state: Record<string, unknown> = { outcomes };
  for (const [i, tradeNo] of ['tp_a', 'tp_b'].entries()) {
    let rows: TopupReversalRow[] = [];
    // The rows as the unit of work hands them to the rules (the same read both backends use).
    await s.ledger.reverseTopupOnce({ provider: i ? 'providerB' : 'providerA', eventId: `read_${tradeNo}`, type: 'read', at: 1, lookup: { tradeNo } },
      (_o, r) => { rows = r; return { outcome: 'read' }; });
    const o = (await s.topupOrders.byTradeNo(tradeNo))!;
    state[tradeNo] = {
      order: { status: o.status, clawedBack: o.clawedBack, paidAmount: o.paidAmount, paidCurrency: o.paidCurrency, paymentRef: o.paymentRef },
      rows: rows.map((r) => [r.key, r.state, Number(r.amount), Number(r.gross), Number(r.asOf), Number(r.since)]).sort(),
      ledger: (await s.ledger.list({ userId: users[i], offset: 0, limit: 100 })).items.map((e) => [e.kind, Number(e.amount), e.ref, Number(e.balanceAfter)]).reverse(),
      balance: (await s.users.byId(users[i]!))!.quota,
    };
  }
  return state;
}

describe('refund and dispute state on SQLite and PostgreSQL', () => {
  test('the same signed events leave the same outcomes, orders, reversal rows and ledger entries', async () => {
    const dbh = openDatabase(':memory:');
    let sqlite: Record<string, any>;
    try {
      sqlite = await run(createStores(dbh));
    } finally {
      dbh.close();
    }
    // What the rules make of it (so the comparison below compares something real).
    expect(sqlite['tp_a'].order).toEqual({ status: 'paid', clawedBack: 5000, paidAmount: 460, paidCurrency: 'eur', paymentRef: 'pi_a' });
    expect(sqlite['tp_b'].order).toMatchObject({ clawedBack: 3000, paidAmount: 550, paidCurrency: 'usd' });
    expect(sqlite.outcomes).toContain('mismatch:currency gbp != usd');
    expect(sqlite['tp_b'].ledger.at(-1)).toEqual(['clawback', -1500, 'tp_b:dispute:disp_1:withdrawn:165', 2000]);
    if (!available) return;
    await pg.reset();
    const postgres = await run(createPgStores(pg.handle.db));
    expect(postgres).toEqual(sqlite);
  }, 20_000);
});
