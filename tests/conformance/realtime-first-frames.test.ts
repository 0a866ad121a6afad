/**
 * The OpenAI realtime client's first frames (session.update, conversation.item.create, response.create;
 * tests/fixtures/clients/realtime) through /v1/realtime over real sockets: they reach the upstream
 * byte-exact and in order, the response comes back, and it is billed. The gateway does not translate
 * realtime frames; this pins that the shapes real clients send pass untouched.
 */
import { describe, expect, test } from 'bun:test';
import fixture from '../fixtures/clients/realtime/openai-realtime-client.json';
import { SAMPLE_COST, open, realtimeSuite, up, w } from '../helpers/realtime-wiring';

realtimeSuite();

describe('realtime client first frames', () => {
  test('forwarded byte-exact in order; response.done relayed and billed', async () => {
    up.echo = false;
    const c = open();
    await c.opened;
    await c.waitFor('session.created');
    const conn = up.connections.at(-1)!;
    for (const f of fixture.frames) c.ws.send(f);
    const done = await c.waitFor('response.done');
    expect(done.response.status).toBe('completed');
    const got = up.received.filter((r) => r.conn === conn.id && !r.binary).map((r) => r.data);
    expect(got).toEqual(fixture.frames);
    const row = w.h.sqlite.query("select * from usage_logs where kind = 'realtime' order by id desc").get() as any;
    expect(row.cost).toBe(SAMPLE_COST);
    up.echo = true;
  });
});
