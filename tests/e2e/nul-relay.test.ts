/**
 * PostgreSQL text cannot hold NUL (U+0000). A NUL in relay message text is the client's to send and is forwarded as
 * sent; nothing a /v1 request makes the gateway store (the requested model in the usage row, metadata.user_id) may make
 * the settlement write fail on PostgreSQL, which would lose the charge and the log row.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import type { TestGateway } from '../helpers/gateway';
import { bothChannelTypes, keyedUser, msg, send, type Scripted } from './relay-setup';

let gw: TestGateway;
let native: Scripted;
let stop: () => Promise<void>;
beforeAll(async () => {
  ({ gw, native, stop } = await bothChannelTypes());
}, 30_000);
afterAll(() => stop());

const logsOf = async (token: string) => (await gw.api('GET', '/api/log/self', undefined, token)).body.data.items as any[];

test('a NUL in message text and metadata.user_id is forwarded, charged and logged', async () => {
  const u = await keyedUser(gw);
  const res = await send(gw, u.key, msg('native-m', { messages: [{ role: 'user', content: 'a\u0000b' }], metadata: { user_id: 'u\u0000x' } }));
  expect(res.status).toBe(200);
  expect(JSON.stringify(native.last().body)).toContain('a\\u0000b');
  const rows = await logsOf(u.token);
  expect(rows.map((r) => [r.model, r.status_code ?? r.status])).toEqual([['native-m', 200]]);
});

test('a NUL in the requested model is refused or logged, never lost: later requests still settle', async () => {
  const u = await keyedUser(gw);
  const bad = await send(gw, u.key, msg('native-m\u0000x'));
  expect(bad.status).toBeLessThan(500);
  const good = await send(gw, u.key, msg('native-m'));
  expect(good.status).toBe(200);
  const rows = await logsOf(u.token);
  expect(rows.some((r) => r.model === 'native-m')).toBe(true);
  expect(gw.logs.filter((l) => /0x00|invalid byte sequence|value_out_of_range|null character/i.test(l))).toEqual([]);
});

test('an upstream error whose type or code holds a NUL is logged, and the next request still settles', async () => {
  const u = await keyedUser(gw);
  native.queue.push({ error: { status: 400, type: 'bad\u0000type', message: 'm\u0000' } });
  const failed = await send(gw, u.key, msg('native-m'));
  expect(failed.status).toBe(400);
  native.queue.push({ text: 'r\u0000t' });
  expect((await send(gw, u.key, msg('native-m'))).status).toBe(200);
  const rows = await logsOf(u.token);
  expect(rows.length).toBe(2);
  expect(gw.logs.filter((l) => /0x00|invalid byte sequence|value_out_of_range|null character/i.test(l))).toEqual([]);
});
