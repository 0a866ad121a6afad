/**
 * Attack: a key's owner creates a tiny key budget while their own requests are in flight, so the
 * settlement's budget cap (meant to keep a budget from being exceeded) cuts the charge to almost
 * nothing; clearing the budget afterwards and repeating would make every request nearly free.
 * A budget that did not exist when a request was admitted must not lower what that request pays.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfUtcDayEnd } from '../helpers/window-edge';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let up: Scripted;

beforeAll(async () => {
  // A charge and the refusal after it must fall in one UTC day of the daily budgets (see clearOfUtcDayEnd).
  await clearOfUtcDayEnd(60_000);
  gw = await startGateway({ BILLING_FLUSH_MS: '1' });
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['m'] });
  // 1 unit per input token, 2 per output token.
  await setPrice(gw, 'm', { input: 1_000_000, output: 2_000_000 });
}, 100_000);
afterAll(async () => {
  await up.stop();
  await gw.stop();
}, 30_000);

/** A prompt whose measured input bound is well above the 400 tokens the double reports. */
const big = (stream = false) => ({ ...msg('m', { stream }), messages: [{ role: 'user', content: 'word '.repeat(600) }] });

const balance = (userId: number) => { gw.services.relay.quota.flush(); return gw.services.relay.quota.balance(userId); };

for (const stream of [false, true]) {
  test(`a key budget set while the request is in flight does not cut its charge (${stream ? 'SSE' : 'JSON'})`, async () => {
    const u = await keyedUser(gw, 100_000);
    const before = balance(u.id);
    const hits = up.hits;
    up.queue.push({ text: 'long answer', usage: { input: 400, output: 50 }, ...(stream ? { chunkDelayMs: 200 } : { delayMs: 1000 }) });
    const pending = send(gw, u.key, big(stream));
    // Admitted (the upstream has it) before the budget is set: a fixed 200 ms head start could set it first on a
    // loaded machine, and the request was then refused at admission (402), not cut mid-flight.
    while (up.hits === hits) await Bun.sleep(5);
    const set = await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: u.keyId, period: 'daily', limit: 1 }, u.token);
    expect(set.status).toBe(200);
    expect((await pending).status).toBe(200);
    await Bun.sleep(50);
    // 400 input + 50 × 2 output = 500 units, whatever budget appeared after admission.
    expect(before - balance(u.id)).toBe(500);
    const log = await gw.api('GET', '/api/log/self?p=1&page_size=1', undefined, u.token);
    expect(log.body.data.items[0].cost ?? log.body.data.items[0].quota).toBe(500);
    // The budget still counts the spend, so it now refuses new requests.
    const next = await send(gw, u.key, msg('m'));
    expect([next.status, next.body.error?.code]).toEqual([402, 'key_budget_exceeded']);
  }, 30_000);
}

test('a budget lowered while a request is in flight still cannot be pushed past its hold (the cap that holds)', async () => {
  const u = await keyedUser(gw, 100_000);
  const set = await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: u.keyId, period: 'daily', limit: 10_000 }, u.token);
  expect(set.status).toBe(200);
  const before = balance(u.id);
  const hits = up.hits;
  up.queue.push({ text: 'x', usage: { input: 400, output: 50 }, delayMs: 1000 });
  const pending = send(gw, u.key, big());
  while (up.hits === hits) await Bun.sleep(5); // admitted, as above
  expect((await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: u.keyId, period: 'daily', limit: 1 }, u.token)).status).toBe(200);
  expect((await pending).status).toBe(200);
  await Bun.sleep(50);
  expect(before - balance(u.id)).toBe(500);
}, 30_000);
