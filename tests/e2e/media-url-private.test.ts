/**
 * Image URLs a translated (OpenAI-compatible) upstream would fetch from inside the operator's network: loopback,
 * private, link-local (169.254.169.254, a cloud metadata address), unspecified, reserved, `localhost`, single-label and
 * internal names (`redis`, `metadata.google.internal`; the message says "host name" for those, "address" for the
 * rest), IPv6 ones, IPv4-mapped, Teredo and ISATAP IPv6 and the
 * decimal, octal and hex spellings of IPv4 are refused with 400 invalid_request_error naming the field, nothing sent
 * or charged (the refusal is logged as a 400, as the translator's other refusals are); so is a URL another parser may read another host from (user info, a backslash). Before, they went to
 * the upstream as `image_url`. MEDIA_URL_ALLOW_PRIVATE=true passes them on; a native channel passes them as before
 * (the gateway does not read its media; Anthropic fetches URLs from its own network).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, send, setPrice, upstream, type Scripted } from './relay-setup';

const PRIVATE = [
  'http://127.0.0.1/a.png', 'http://127.8.9.10:8080/a.png', 'http://10.0.0.5/admin', 'http://172.16.0.1/a.png', 'http://172.31.255.254/a.png',
  'http://192.168.1.1/a.png', 'http://169.254.169.254/latest/meta-data/', 'http://[::1]/a.png', 'http://[fd12:3456::1]/a.png',
  'http://[fe80::1]/a.png', 'http://localhost:9000/a.png', 'http://printer.localhost/a.png', 'http://LOCALHOST./a.png', 'http://0.0.0.0/a.png',
  'http://[::ffff:127.0.0.1]/a.png', 'http://[::ffff:a9fe:a9fe]/a.png', 'http://2130706433/a.png', 'http://0177.0.0.1/a.png',
  'http://0x7f000001/a.png', 'http://0x7f.1/a.png', 'http://127.1/a.png', 'https://10.1/a.png', 'http://0/a.png',
  'http://user:pw@example.com/a.png', 'http://example.com\\@127.0.0.1/a.png',
  // Internal names (a Compose service, GCP's metadata name) and reserved ranges (broadcast, 6to4 of loopback).
  'http://redis:6379/a.png', 'http://metadata.google.internal/computeMetadata/v1/', 'http://255.255.255.255/a.png', 'http://[2002:7f00:1::1]/a.png',
  // IPv4 inside IPv6: Teredo (client 169.254.169.254 inverted in the last 32 bits; server 10.0.0.1), ISATAP of 10.0.0.5.
  'http://[2001:0:4136:e378:8000:63bf:5601:5601]/latest/meta-data/', 'http://[2001:0:a00:1:8000:63bf:3fff:fdd2]/a.png', 'http://[2001:db8::5efe:a00:5]/a.png',
];
const PUBLIC = ['https://example.com/a.png', 'http://172.32.0.1/a.png', 'http://8.8.8.8/a.png', 'http://[2001:4860::8888]/a.png', 'http://[::ffff:8.8.8.8]/a.png',
  'http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/a.png'];

let gw: TestGateway;
let open: TestGateway;
let oai: Scripted;
let native: Scripted;
beforeAll(async () => {
  oai = upstream('openai');
  native = upstream('anthropic');
  [gw, open] = await Promise.all([startGateway(), startGateway({ MEDIA_URL_ALLOW_PRIVATE: 'true' })]);
  for (const g of [gw, open]) {
    await addChannel(g, { type: 'openai', url: oai.url, models: ['oai-m'] });
    await addChannel(g, { type: 'anthropic', url: native.url, models: ['native-m'] });
    for (const m of ['oai-m', 'native-m']) await setPrice(g, m);
  }
});
afterAll(async () => { await Promise.all([gw.stop(), open.stop()]); await oai.stop(); await native.stop(); });

const image = (url: string) => ({ type: 'image', source: { type: 'url', url } });
/** The URL in a turn, inside a tool_result and inside a document's content, with the param each is named by. */
const placements = (url: string): Array<[unknown[], string]> => [
  [[{ role: 'user', content: [{ type: 'text', text: 'What is this?' }, image(url)] }], 'messages[0].content[1].source.url'],
  [[{ role: 'user', content: 'Hi' }, { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'f', input: {} }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [image(url)] }] }], 'messages[2].content[0].content[0].source.url'],
  [[{ role: 'user', content: [{ type: 'document', source: { type: 'content', content: [image(url)] } }, { type: 'text', text: 'Read it' }] }], 'messages[0].content[0].source.content[0].source.url'],
];
const ask = (model: string, messages: unknown[], stream = false) => ({ model, max_tokens: 50, stream, messages, tools: [{ name: 'f', input_schema: { type: 'object' } }] });

describe('private-address media URLs on translated channels', () => {
  test('are refused with 400 naming the field: nothing sent or charged', async () => {
    const u = await keyedUser(gw, 1_000_000);
    const hits = oai.hits;
    for (const url of PRIVATE) {
      for (const [messages, param] of placements(url)) {
        const r = await send(gw, u.key, ask('oai-m', messages, param.includes('tool_result')));
        expect({ url, status: r.status, type: r.body?.error?.type, param: r.body?.error?.param, msg: r.body?.error?.message?.startsWith(param.replace(/\[(\d+)\]/g, '.$1')) })
          .toEqual({ url, status: 400, type: 'invalid_request_error', param, msg: true });
      }
    }
    expect(oai.hits).toBe(hits);
    gw.services.relay.quota.flush();
    // Logged as refused requests (as a translator's other 400s are), none of them charged.
    expect(await gw.db.get('select count(*) as n from usage_logs where user_id = ? and (status <> 400 or cost <> 0)', u.id)).toEqual({ n: 0 });
    expect(await gw.services.ledger.sum(u.id)).toBe(1_000_000);
  }, 30_000);

  test('the refusal says host name for a name and address for an address', async () => {
    const u = await keyedUser(gw, 1_000_000);
    const NAME = 'URL points at a host name only a private network resolves';
    const ADDRESS = 'URL points at a private, loopback or link-local address';
    for (const [url, what] of [['http://metadata.google.internal/computeMetadata/v1/', NAME], ['http://redis:6379/a.png', NAME],
      ['http://169.254.169.254/latest/meta-data/', ADDRESS], ['http://[2001:0:4136:e378:8000:63bf:5601:5601]/', ADDRESS]] as const) {
      const r = await send(gw, u.key, ask('oai-m', placements(url)[0]![0]));
      const message = String(r.body?.error?.message);
      expect({ url, status: r.status, says: message.startsWith(`messages.0.content.1.source.url: ${what}`), message }).toMatchObject({ url, status: 400, says: true });
    }
  });

  test('public addresses and names still reach the upstream as given', async () => {
    const u = await keyedUser(gw, 1_000_000);
    for (const url of PUBLIC) {
      const r = await send(gw, u.key, ask('oai-m', placements(url)[0]![0]));
      expect({ url, status: r.status }).toEqual({ url, status: 200 });
      expect(JSON.stringify(oai.last().body.messages)).toContain(JSON.stringify(url));
    }
  }, 20_000);

  test('MEDIA_URL_ALLOW_PRIVATE=true passes them on; a native channel passes them either way', async () => {
    const u = await keyedUser(open, 1_000_000);
    const r = await send(open, u.key, ask('oai-m', placements('http://10.0.0.5/a.png')[0]![0]));
    expect(r.status).toBe(200);
    expect(JSON.stringify(oai.last().body.messages)).toContain('http://10.0.0.5/a.png');
    const v = await keyedUser(gw, 1_000_000);
    const n = await send(gw, v.key, ask('native-m', placements('http://10.0.0.5/a.png')[0]![0]));
    expect(n.status).toBe(200);
    expect(JSON.stringify(native.last().body.messages)).toContain('http://10.0.0.5/a.png');
  }, 20_000);
});
