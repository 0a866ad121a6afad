/**
 * Hostile `cursor` values on the usage log listings, over real HTTP on both backends: anything that is not a
 * next_cursor, or names a row beyond any column's range, is a 400 JSON error or an empty page, never a 500.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

test('malformed, huge, negative and injected cursors: 400 JSON or a page, never a 5xx', async () => {
  const a = await makeUser(gw);
  const cursors = ['', 'x', '-1.5', '1.-5', '1.5.6', '1e3.1', "1.1' or 1=1--", '1.1;drop table usage_logs', '9999999999999999.1', '1.9999999999999999',
    '9007199254740991.9007199254740991', '1.2147483648', '1.4294967296', '2147483648.1', '9007199254740991.1', '1.9007199254740991', '0.0', '00000000000000001.1', '1.1 ', '１.１'];
  for (const c of cursors) {
    for (const [path, token] of [['/api/log/', undefined], ['/api/log/self', a.token]] as const) {
      for (const extra of ['', '&p=2', '&p=1000000']) {
        const r = await gw.api('GET', `${path}?cursor=${encodeURIComponent(c)}${extra}`, undefined, token);
        if (r.status >= 500 || typeof r.body !== 'object') throw new Error(`${path} cursor=${JSON.stringify(c)}${extra}: ${r.status} ${JSON.stringify(r.body)}`);
        expect([200, 400]).toContain(r.status);
        if (r.status === 400) expect(r.body.error.param ?? 'cursor').toBeTruthy();
      }
    }
  }
}, 30_000);

test('the documented error codes: a cursor of another shape is invalid_format, one whose numbers pass 2^53 − 1 invalid_value', async () => {
  const a = await makeUser(gw);
  for (const [c, code] of [['x', 'invalid_format'], ['1.5.6', 'invalid_format'], ['9999999999999999.1', 'invalid_value'], ['1.9999999999999999', 'invalid_value']] as const) {
    const r = await gw.api('GET', `/api/log/self?cursor=${encodeURIComponent(c)}`, undefined, a.token);
    expect([c, r.status, r.body.error?.code, r.body.error?.param]).toEqual([c, 400, code, 'cursor']);
  }
});
