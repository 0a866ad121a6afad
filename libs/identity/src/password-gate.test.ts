import { expect, test } from 'bun:test';
import { GatewayError } from '@gw/core';
import { PasswordGate } from './password-gate';

test('slots run at once, the queue waits in arrival order, the rest are 503 at once', async () => {
  const g = new PasswordGate({ slots: 1, queue: 2 });
  const first = await g.acquire();
  const order: number[] = [];
  const a = g.acquire().then((rel) => { order.push(1); return rel; });
  const b = g.acquire().then((rel) => { order.push(2); return rel; });
  const refused = await g.acquire().catch((e) => e);
  expect(refused).toBeInstanceOf(GatewayError);
  expect(refused).toMatchObject({ status: 503, code: 'password_checks_busy', headers: { 'retry-after': '1' } });
  expect(g.load).toEqual({ running: 1, waiting: 2 });
  first();
  first(); // a second release frees nothing more
  const ra = await a;
  expect(order).toEqual([1]);
  expect(g.load).toEqual({ running: 1, waiting: 1 });
  ra();
  (await b)();
  expect(order).toEqual([1, 2]);
  expect(g.load).toEqual({ running: 0, waiting: 0 });
});

test('run releases its slot when the work throws', async () => {
  const g = new PasswordGate({ slots: 1, queue: 0 });
  await expect(g.run(async () => { throw new Error('boom'); })).rejects.toThrow('boom');
  expect(await g.run(async () => 7)).toBe(7);
  expect(g.load).toEqual({ running: 0, waiting: 0 });
});
