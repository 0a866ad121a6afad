/**
 * Metering invariants over real HTTP: a prepaid balance can never be overrun, whatever the input or the
 * upstream's report, and a served request is never free.
 *
 * - Input the gateway cannot measure (URL/file sources, base64 PDFs) reserves the model's context window,
 *   so an upstream billing a 100-page PDF (200k input tokens) is covered by the reservation and billed in full.
 * - Whatever happens, a charge is at most its reservation plus what the user could still spend: the
 *   ledger's balance_after never goes below zero.
 * - Hostile usage numbers (fractions, 1e400, negatives, strings, null) still bill the request, flagged.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, nodeOne, send, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let ant: Scripted;
let oai: Scripted;
// 200k input tokens cost 2,000 units; 100 output tokens at most cost 1 unit.
// cache_write_1h named: unset it is 8/5 of cache_write, the dearest input, and the arithmetic below takes 10,000 as that.
const PRICE = { input: 10_000, output: 10_000, cache_read: 1_000, cache_write: 10_000, cache_write_1h: 10_000 };

beforeAll(async () => {
  gw = await startGateway();
  ant = upstream('anthropic');
  oai = upstream('openai');
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['doc-model', 'text-model'] });
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['oai-model'] });
  for (const model of ['doc-model', 'text-model', 'oai-model']) {
    const r = await gw.api('PUT', '/api/pricing/', { model, ...PRICE });
    expect(r.status).toBe(200);
  }
});
afterAll(async () => { await ant.stop(); await oai.stop(); await gw.stop(); });

const balance = async (id: number) => { gw.services.relay.quota.flush(); return (await gw.services.users.byId(id))!.quota; };
const lowestBalanceAfter = async (id: number) => (await gw.db.get('select min(balance_after) as m from ledger where user_id = ?', id)).m as number;
const logs = (id: number) => gw.db.all("select * from usage_logs where user_id = ? and kind = 'messages'", id);

const DOCS = [
  { type: 'document', source: { type: 'url', url: 'https://example.com/100-pages.pdf' } },
  { type: 'document', source: { type: 'file', file_id: 'file_011' } },
  { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0xLjQK' } },
  { type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } },
];
const withDoc = (model: string, i: number) => ({
  model, max_tokens: 100, stream: i % 2 === 1,
  messages: [{ role: 'user', content: [DOCS[i % DOCS.length], { type: 'text', text: 'Summarise this.' }] }],
});

describe('reservations cover the worst case', () => {
  test('50 parallel requests with unmeasurable documents, upstream reporting 200k input each: all served ones billed in full, balance never below 0', async () => {
    const u = await keyedUser(gw, 20_000);
    // Held long enough that all 50 are in flight together.
    ant.queue.push(...Array.from({ length: 50 }, () => ({ delayMs: 100, usage: { input: 200_000, output: 50 } })));
    const rs = await Promise.all(Array.from({ length: 50 }, (_, i) => send(gw, u.key, withDoc('doc-model', i))));
    ant.queue.length = 0;
    const served = rs.filter((r) => r.status === 200);
    for (const r of rs) expect([200, 402]).toContain(r.status);
    // Each reserved 2,001 (200k context × 10,000/M + 100 × 10,000/M) and is charged 2,001 (200k in + 50 out, rounded up).
    expect(served.length).toBe(Math.floor(20_000 / 2001));
    const rows = (await logs(u.id)).filter((l) => l.status === 200);
    expect(rows.length).toBe(served.length);
    for (const l of rows) expect(l).toMatchObject({ input_tokens: 200_000, output_tokens: 50, cost: 2001, usage_flag: '' });
    expect(await balance(u.id)).toBe(20_000 - 2001 * served.length);
    expect(await lowestBalanceAfter(u.id)).toBeGreaterThanOrEqual(0);
    expect(await gw.services.ledger.sum(u.id)).toBe(await balance(u.id));
  });

  test('the reservation of unmeasurable input is the context window (price row context_window), no more', async () => {
    const set = await gw.api('PUT', '/api/pricing/', { model: 'doc-model', ...PRICE, context_window: 50_000 });
    expect(set.body.data.context_window).toBe(50_000);
    try {
      // 50k × 10,000/M + 100 × 10,000/M = 501: exactly affordable with 501, refused with 500.
      const poor = await keyedUser(gw, 500);
      expect((await send(gw, poor.key, withDoc('doc-model', 0))).status).toBe(402);
      const ok = await keyedUser(gw, 501);
      ant.queue.push({ usage: { input: 900_000, output: 10 } });
      expect((await send(gw, ok.key, withDoc('doc-model', 0))).status).toBe(200);
      // A report beyond the context window is implausible: clamped to it and flagged.
      expect((await logs(ok.id))[0]).toMatchObject({ input_tokens: 50_000, output_tokens: 10, cost: 501, usage_flag: 'implausible' });
      expect(await balance(ok.id)).toBe(0);
    } finally {
      await gw.api('PUT', '/api/pricing/', { model: 'doc-model', ...PRICE });
    }
  });

  test("a text document's title and context are input the model reads: reserved like its text", async () => {
    // 100k characters of title (or context): at least 50k tokens bound, 500 units at 10,000/M; the text itself is tiny.
    const big = 'x'.repeat(100_000);
    for (const model of ['text-model', 'oai-model']) {
      for (const field of ['title', 'context']) {
        const poor = await keyedUser(gw, 400);
        const doc = { type: 'document', [field]: big, source: { type: 'text', media_type: 'text/plain', data: 'short' } };
        const r = await send(gw, poor.key, { model, max_tokens: 100, messages: [{ role: 'user', content: [doc, { type: 'text', text: 'Summarise.' }] }] });
        expect([model, field, r.status]).toEqual([model, field, 402]);
      }
    }
  });

  test('text in other scripts is reserved by its UTF-8 bytes: 20 parallel Cyrillic prompts read as 1 token a character are each billed in full', async () => {
    // 3,000 Cyrillic characters (6,000 UTF-8 bytes), which a tokenizer may read as 3,000 tokens: 30 units of input at
    // 10,000/M, plus at most 1 of output. Counted as 2 characters a token, the hold was half of that, so with everything
    // held at once the balance ran out at half the charges and the rest were capped: 20 answers for the price of ~10.
    const u = await keyedUser(gw, 310);
    const prompt = 'д'.repeat(3000);
    ant.queue.push(...Array.from({ length: 20 }, () => ({ delayMs: 150, usage: { input: 3000, output: 50 } })));
    const rs = await Promise.all(Array.from({ length: 20 }, (_, i) => send(nodeOne(gw), u.key, { model: 'text-model', max_tokens: 100, stream: i % 2 === 1, messages: [{ role: 'user', content: prompt }] })));
    ant.queue.length = 0;
    for (const r of rs) expect([200, 402]).toContain(r.status);
    const rows = (await logs(u.id)).filter((l) => l.status === 200);
    // Each charged 31 (3,000 in + 50 out, rounded up) and held a little more: 9 fit in 310, not 20.
    for (const l of rows) expect(l).toMatchObject({ input_tokens: 3000, output_tokens: 50, cost: 31, usage_flag: '' });
    expect(rows.length).toBe(rs.filter((r) => r.status === 200).length);
    expect(rows.length).toBeLessThanOrEqual(10);
    expect(await balance(u.id)).toBe(310 - 31 * rows.length);
    expect(await gw.services.ledger.sum(u.id)).toBe(await balance(u.id));
  });

  test('50 parallel small text requests whose upstream reports 200k input each: charges capped at what the user has, never below 0, none free', async () => {
    const u = await keyedUser(gw, 20_000);
    ant.queue.push(...Array.from({ length: 50 }, () => ({ delayMs: 100, usage: { input: 200_000, output: 50 } })));
    // All to one node: the premise is that all 50 are admitted before the first settles (behind the cluster
    // proxy, a node's first requests can come after it, and are then refused 402, rightly).
    const rs = await Promise.all(Array.from({ length: 50 }, (_, i) => send(nodeOne(gw), u.key, { model: 'text-model', max_tokens: 100, stream: i % 2 === 1, messages: [{ role: 'user', content: 'Hi' }] })));
    ant.queue.length = 0;
    expect(rs.every((r) => r.status === 200)).toBe(true);
    const rows = await logs(u.id);
    expect(rows.length).toBe(50);
    for (const l of rows) expect(l.cost).toBeGreaterThan(0);
    expect(rows.filter((l) => l.usage_flag === 'capped').length).toBeGreaterThan(0);
    expect(rows.reduce((n, l) => n + l.cost, 0)).toBeLessThanOrEqual(20_000);
    expect(await balance(u.id)).toBeGreaterThanOrEqual(0);
    expect(await lowestBalanceAfter(u.id)).toBeGreaterThanOrEqual(0);
    expect(await gw.services.ledger.sum(u.id)).toBe(await balance(u.id));
  });

  test('a limited key is capped by its own budget the same way', async () => {
    const u = await keyedUser(gw, 1_000_000, { unlimited_quota: false, remain_quota: 3000 });
    ant.queue.push(...Array.from({ length: 10 }, () => ({ delayMs: 50, usage: { input: 200_000, output: 50 } })));
    const rs = await Promise.all(Array.from({ length: 10 }, () => send(gw, u.key, { model: 'text-model', max_tokens: 100, messages: [{ role: 'user', content: 'Hi' }] })));
    ant.queue.length = 0;
    expect(rs.every((r) => r.status === 200)).toBe(true);
    const key = await gw.db.get('select remain_quota from api_keys where id = ?', u.keyId);
    expect(key.remain_quota).toBeGreaterThanOrEqual(0);
    expect(await gw.services.ledger.sum(u.id)).toBe(await balance(u.id));
  });
});
