/**
 * The OpenAI realtime client's first frames (session.update, conversation.item.create, response.create;
 * tests/fixtures/clients/realtime) through /v1/realtime over real sockets: they reach the upstream
 * byte-exact and in order (the response.create under an event_id of the gateway's), the response comes back, and it
 * is billed. The gateway does not translate realtime frames; this pins that the shapes real clients send pass untouched.
 */
import { describe, expect, test } from 'bun:test';
import fixture from '../fixtures/clients/realtime/openai-realtime-client.json';
import { SAMPLE_COST, open, realtimeSuite, up, w } from '../helpers/realtime-wiring';

realtimeSuite();

describe('realtime client first frames', () => {
  test('forwarded byte-exact in order (a response.create under the gateway\'s event_id); response.done relayed and billed', async () => {
    up.echo = false;
    const c = open();
    await c.opened;
    await c.waitFor('session.created');
    const conn = up.connections.at(-1)!;
    for (const f of fixture.frames) c.ws.send(f);
    const done = await c.waitFor('response.done');
    expect(done.response.status).toBe('completed');
    const got = up.received.filter((r) => r.conn === conn.id && !r.binary).map((r) => r.data);
    // Byte for byte, but the response.create, which reaches the upstream under an event_id of the gateway's (the one
    // an upstream error refusing it names; libs/realtime/src/meter.ts), the event otherwise the same.
    const isCreate = (f: string) => JSON.parse(f).type === 'response.create';
    expect(got.filter((f) => !isCreate(f as string))).toEqual(fixture.frames.filter((f) => !isCreate(f)));
    expect(got.filter((f) => isCreate(f as string)).map((f) => JSON.parse(f as string)))
      .toEqual(fixture.frames.filter(isCreate).map((f) => ({ ...JSON.parse(f), event_id: expect.stringMatching(/^evt_gw_\w+$/) })));
    expect(got.map((f) => JSON.parse(f as string).type)).toEqual(fixture.frames.map((f) => JSON.parse(f).type));
    const row = w.h.sqlite.query("select * from usage_logs where kind = 'realtime' order by id desc").get() as any;
    expect(row.cost).toBe(SAMPLE_COST);
    up.echo = true;
  });
});
