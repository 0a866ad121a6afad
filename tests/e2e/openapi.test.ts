import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { createApp } from '../../apps/server/src/app';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
let doc: any;
beforeAll(async () => {
  gw = await startGateway();
  const res = await fetch(`${gw.url}/openapi/json`);
  expect(res.status).toBe(200);
  doc = await res.json();
});
afterAll(async () => { await gw.stop(); });

const toDocPath = (p: string) => p.replace(/:([^/]+)/g, '{$1}');
const HIDDEN = new Set(['/openapi', '/openapi/json', '/openapi/assets/:file']);

describe('OpenAPI document', () => {
  test('is OpenAPI 3.1 with bearer and cookie security schemes', () => {
    expect(doc.openapi).toMatch(/^3\.1/);
    expect(doc.info.title).toBe('AI Gateway');
    expect(doc.components.securitySchemes.bearer).toMatchObject({ type: 'http', scheme: 'bearer' });
    expect(doc.components.securitySchemes.cookie).toMatchObject({ type: 'apiKey', in: 'cookie', name: 'gw_session' });
  });

  test('covers every route of the app (including routes added by other modules)', () => {
    const routes = createApp(gw.services).routes.filter((r) => ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'].includes(r.method) && !HIDDEN.has(r.path));
    expect(routes.length).toBeGreaterThan(30);
    const missing = routes.filter((r) => !doc.paths[toDocPath(r.path)]?.[r.method.toLowerCase()]).map((r) => `${r.method} ${r.path}`);
    expect(missing).toEqual([]);
  });

  test('lists the known management routes', () => {
    const known = [
      'post /api/user/login', 'get /api/user/self', 'get /api/channel/', 'post /api/channel/', 'put /api/channel/',
      'post /api/channel/batch', 'post /api/channel/tag/enabled', 'post /api/channel/tag/disabled', 'get /api/channel/{id}',
      'delete /api/channel/{id}', 'post /api/channel/{id}/test', 'get /api/user/', 'post /api/user/', 'put /api/user/',
      'get /api/user/{id}', 'delete /api/user/{id}', 'post /api/user/{id}/enable', 'post /api/user/{id}/disable',
      'put /api/user/self', 'get /api/token/', 'post /api/token/', 'put /api/token/', 'get /api/token/{id}', 'delete /api/token/{id}',
    ];
    for (const k of known) {
      const [method, path] = k.split(' ') as [string, string];
      expect({ k, present: !!doc.paths[path]?.[method] }).toEqual({ k, present: true });
    }
  });

  test('request and response shapes come from the validating schemas', () => {
    const create = doc.paths['/api/channel/'].post;
    const reqSchema = create.requestBody.content['application/json'].schema;
    expect(reqSchema.required).toEqual(expect.arrayContaining(['name', 'type', 'base_url', 'key', 'models']));
    expect(reqSchema.properties.weight).toMatchObject({ type: 'integer', minimum: 1, maximum: 10000 });
    const resSchema = JSON.stringify(create.responses['200']);
    for (const field of ['success', 'base_url', 'status_reason', 'response_time_ms']) expect(resSchema).toContain(field);
    const userCreate = doc.paths['/api/user/'].post.requestBody.content['application/json'].schema;
    expect(userCreate.required).toEqual(expect.arrayContaining(['username', 'password']));
    expect(JSON.stringify(doc.paths['/api/token/'].post.responses['200'])).toContain('"key"');
    expect(doc.paths['/api/channel/'].get.parameters.map((p: any) => p.name)).toEqual(expect.arrayContaining(['p', 'page_size', 'status', 'tag', 'type', 'model', 'keyword']));
    expect(create.tags).toEqual(['channel']);
    expect(create.summary).toBeTruthy();
  });

  test('model routes document their body (validated after auth, so not through Elysia) and responses', () => {
    const m = doc.paths['/v1/messages'].post;
    expect(m.parameters.map((p: any) => p.name)).toContain('vendor-version');
    const body = m.requestBody.content['application/json'].schema;
    expect(body.required).toEqual(expect.arrayContaining(['model', 'messages', 'max_tokens']));
    expect(body.properties.max_tokens.type).toBe('integer');
    expect(Object.keys(m.responses)).toEqual(expect.arrayContaining(['200', '400', '401', '402', '404', '429', '503']));
    expect(m.responses['200'].content['application/json'].schema.properties.usage).toBeDefined();
    expect(doc.paths['/v1/models'].get.responses['200'].content['application/json'].schema.properties.data.items.properties.id.type).toBe('string');
    expect(doc.paths['/v1/models/{id}'].get.responses['200'].content['application/json'].schema.required).toEqual(expect.arrayContaining(['type', 'id', 'display_name', 'created_at']));
    const c = doc.paths['/v1/messages/count_tokens'].post;
    expect(c.requestBody.content['application/json'].schema.required).not.toContain('max_tokens');
  });

  test('security: protected routes need bearer or cookie, public ones none', () => {
    expect(doc.paths['/api/channel/'].get.security).toEqual([{ bearer: [] }, { cookie: [] }]);
    expect(doc.paths['/api/user/login'].post.security).toEqual([]);
    if (doc.paths['/api/user/reset']) expect(doc.paths['/api/user/reset'].post.security).toEqual([]);
  });
});

describe('OpenAPI UI', () => {
  test('the page loads its assets from the gateway, not a CDN', async () => {
    const res = await fetch(`${gw.url}/openapi`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/html');
    const html = await res.text();
    expect(html).toContain('/openapi/assets/swagger-ui-bundle.js');
    expect(html).toContain("url: '/openapi/json'");
    expect(html).not.toMatch(/https?:\/\//);
    for (const [asset, type] of [['swagger-ui-bundle.js', 'javascript'], ['swagger-ui.css', 'text/css']] as const) {
      const a = await fetch(`${gw.url}/openapi/assets/${asset}`);
      expect(a.status).toBe(200);
      expect(a.headers.get('content-type')).toContain(type);
      expect((await a.arrayBuffer()).byteLength).toBeGreaterThan(10_000);
    }
    expect((await fetch(`${gw.url}/openapi/assets/..%2Fpackage.json`)).status).toBe(404);
    expect((await fetch(`${gw.url}/openapi/assets/index.html`)).status).toBe(404);
  });
});

test('pricing and channel schemas document the cache-write tiers, the long-context tier and the header policy', () => {
  const price = doc.paths['/api/pricing/'].put.requestBody.content['application/json'].schema.properties;
  for (const f of ['cache_write_1h', 'long_context_threshold', 'long_context']) expect(price[f]).toBeDefined();
  const channel = doc.paths['/api/channel/'].post.requestBody.content['application/json'].schema.properties;
  expect(Object.keys(channel.header_policy.properties).sort()).toEqual(['allow_service_tier', 'beta_rewrite', 'beta_strip', 'forward_headers']);
});
