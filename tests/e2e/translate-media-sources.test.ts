/**
 * Image and document sources on OpenAI-compatible channels, where they become data URLs or image URLs the upstream
 * decodes or fetches. Refused as Anthropic refuses them (400 invalid_request_error, nothing sent or charged): a base64
 * image whose media_type is not one of Anthropic's four image types (a PDF sent as an "image" was reserved as one
 * image, and `image/png;base64,<other data>` put data the gateway never measured in front of the data it did), a
 * base64 PDF document with another media_type, a source whose data or url is not a string, and a url source that is
 * not http(s) (`file:///etc/passwd` reached a self-hosted server that reads local media paths).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, send, setPrice, upstream, type Scripted } from './relay-setup';

const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';
let gw: TestGateway;
let oai: Scripted;
beforeAll(async () => {
  gw = await startGateway();
  oai = upstream('openai');
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['oai-m'] });
  await setPrice(gw, 'oai-m');
});
afterAll(async () => {
  await gw.stop();
  await oai.stop();
});

const ask = (block: object) => ({ model: 'oai-m', max_tokens: 50, messages: [{ role: 'user', content: [block, { type: 'text', text: 'What is this?' }] }] });
const image = (source: object) => ({ type: 'image', source });
const pdf = (source: object) => ({ type: 'document', source });

describe('media sources a translated upstream would decode or fetch', () => {
  test('refused with 400 before any upstream call or charge', async () => {
    const u = await keyedUser(gw, 1_000_000);
    const hits = oai.hits;
    const refused: [object, string][] = [
      [image({ type: 'base64', media_type: 'application/pdf', data: PNG }), 'messages[0].content[0].source.media_type'],
      [image({ type: 'base64', media_type: `image/png;base64,${PNG}#`, data: PNG }), 'messages[0].content[0].source.media_type'],
      [image({ type: 'base64', media_type: 'image/png', data: { big: PNG } }), 'messages[0].content[0].source.data'],
      [image({ type: 'base64', media_type: 'image/png', data: `${PNG},<extra>` }), 'messages[0].content[0].source.data'],
      [image({ type: 'url', url: 'file:///etc/passwd' }), 'messages[0].content[0].source.url'],
      [image({ type: 'url', url: 'ftp://example.com/a.png' }), 'messages[0].content[0].source.url'],
      [image({ type: 'url', url: { href: 'https://example.com/a.png' } }), 'messages[0].content[0].source.url'],
      [pdf({ type: 'base64', media_type: 'image/png', data: PNG }), 'messages[0].content[0].source.media_type'],
    ];
    for (const stream of [false, true]) {
      for (const [block, param] of refused) {
        const r = await send(gw, u.key, { ...ask(block), stream });
        expect({ block, status: r.status, type: r.body?.error?.type, param: r.body?.error?.param })
          .toEqual({ block, status: 400, type: 'invalid_request_error', param });
      }
    }
    expect(oai.hits).toBe(hits);
    gw.services.relay.quota.flush();
    expect(await gw.services.ledger.sum(u.id)).toBe(1_000_000);
  }, 20_000);

  test('well-formed images and documents still reach the upstream as before', async () => {
    const u = await keyedUser(gw, 1_000_000);
    const sent: [object, unknown][] = [
      [image({ type: 'base64', media_type: 'image/png', data: PNG }), { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } }],
      [image({ type: 'base64', media_type: 'image/webp', data: PNG.replace(/=+$/, '') }), { type: 'image_url', image_url: { url: `data:image/webp;base64,${PNG.replace(/=+$/, '')}` } }],
      [image({ type: 'url', url: 'https://example.com/a.png' }), { type: 'image_url', image_url: { url: 'https://example.com/a.png' } }],
      [image({ type: 'url', url: 'HTTP://example.com/a.png' }), { type: 'image_url', image_url: { url: 'HTTP://example.com/a.png' } }],
      [pdf({ type: 'base64', media_type: 'application/pdf', data: PNG }), { type: 'file', file: { filename: 'document.pdf', file_data: `data:application/pdf;base64,${PNG}` } }],
    ];
    for (const [block, part] of sent) {
      const r = await send(gw, u.key, ask(block));
      expect(r.status).toBe(200);
      expect(oai.last().body.messages.at(-1).content[0]).toEqual(part);
    }
  }, 20_000);
});
