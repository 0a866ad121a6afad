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
}, 20_000); // starting on PostgreSQL takes seconds on a loaded machine
afterAll(async () => { await gw.stop(); });

/** A schema with its component references inlined (the assertions below read shapes, wherever they are declared). */
const inline = (node: any): any => {
  if (Array.isArray(node)) return node.map(inline);
  if (!node || typeof node !== 'object') return node;
  if (typeof node.$ref === 'string' && node.$ref.startsWith('#/components/schemas/')) return inline(doc.components.schemas[node.$ref.split('/').pop()!]);
  return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, inline(v)]));
};

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
    const create = inline(doc.paths['/api/channel/'].post);
    const reqSchema = create.requestBody.content['application/json'].schema;
    expect(reqSchema.required).toEqual(expect.arrayContaining(['name', 'type', 'base_url', 'key', 'models']));
    expect(reqSchema.properties.weight).toMatchObject({ type: 'integer', minimum: 1, maximum: 10000 });
    const resSchema = JSON.stringify(create.responses['200']);
    for (const field of ['success', 'base_url', 'status_reason', 'response_time_ms']) expect(resSchema).toContain(field);
    const userCreate = inline(doc.paths['/api/user/'].post).requestBody.content['application/json'].schema;
    expect(userCreate.required).toEqual(expect.arrayContaining(['username', 'password']));
    expect(JSON.stringify(inline(doc.paths['/api/token/'].post.responses['200']))).toContain('"key"');
    expect(doc.paths['/api/channel/'].get.parameters.map((p: any) => p.name)).toEqual(expect.arrayContaining(['p', 'page_size', 'status', 'tag', 'type', 'model', 'keyword']));
    expect(create.tags).toEqual(['channel']);
    expect(create.summary).toBeTruthy();
  });

  test('model routes document their body (validated after auth, so not through Elysia) and responses', () => {
    const m = inline(doc.paths['/v1/messages'].post);
    expect(m.parameters.map((p: any) => p.name)).toContain('vendor-version');
    const body = m.requestBody.content['application/json'].schema;
    expect(body.required).toEqual(expect.arrayContaining(['model', 'messages', 'max_tokens']));
    expect(body.properties.max_tokens.type).toBe('integer');
    expect(Object.keys(m.responses)).toEqual(expect.arrayContaining(['200', '400', '401', '402', '404', '429', '503']));
    expect(m.responses['200'].content['application/json'].schema.properties.usage).toBeDefined();
    expect(inline(doc.paths['/v1/models'].get).responses['200'].content['application/json'].schema.properties.data.items.properties.id.type).toBe('string');
    expect(inline(doc.paths['/v1/models/{id}'].get).responses['200'].content['application/json'].schema.required).toEqual(expect.arrayContaining(['type', 'id', 'display_name', 'created_at']));
    const c = inline(doc.paths['/v1/messages/count_tokens'].post);
    expect(c.requestBody.content['application/json'].schema.required).not.toContain('max_tokens');
  });

  test('security: protected routes need bearer or cookie, public ones none', () => {
    expect(doc.paths['/api/channel/'].get.security).toEqual([{ bearer: [] }, { cookie: [] }]);
    expect(doc.paths['/api/user/login'].post.security).toEqual([]);
    if (doc.paths['/api/user/reset']) expect(doc.paths['/api/user/reset'].post.security).toEqual([]);
  });
});

/** Every operation of the document, with its path and method. */
const operations = () => Object.entries(doc.paths as Record<string, Record<string, any>>)
  .flatMap(([path, ops]) => Object.entries(ops).map(([method, op]) => ({ path, method, op })));

describe('OpenAPI document worth reading', () => {
  test('every operation has a summary, a description and a tag; every tag used is declared with a description', () => {
    const declared = new Map((doc.tags as any[]).map((t) => [t.name, t.description]));
    const lacking = operations().filter(({ op }) => !op.summary || !op.description || !op.tags?.length || op.tags.some((t: string) => !declared.get(t)));
    expect(lacking.map(({ method, path }) => `${method} ${path}`)).toEqual([]);
    for (const [name, description] of declared) expect({ name, described: typeof description === 'string' && description.length > 20 }).toEqual({ name, described: true });
  });

  test('the model API comes first: tag order model, realtime, then management; /v1 paths first', () => {
    expect((doc.tags as any[]).slice(0, 2).map((t) => t.name)).toEqual(['model', 'realtime']);
    const paths = Object.keys(doc.paths);
    const firstApi = paths.findIndex((p) => p.startsWith('/api/'));
    expect(paths.slice(0, firstApi).every((p) => p.startsWith('/v1'))).toBe(true);
    expect(paths.slice(firstApi).some((p) => p.startsWith('/v1'))).toBe(false);
  });

  test('no summary or description mentions internal documents or markers', () => {
    const text = JSON.stringify(operations().map(({ op }) => [op.summary, op.description])) + JSON.stringify(doc.info);
    expect(text).not.toMatch(/\(SPEC\)|\bSPEC\b|API\.md|STACK-NOTES|issue \d/);
  });

  test('the error object is declared once in components and every error response references it', () => {
    expect(doc.components.schemas.ErrorObject.required).toEqual(['message', 'type', 'param', 'code']);
    expect(doc.components.responses.ApiError.content['application/json'].schema.$ref).toBe('#/components/schemas/ApiError');
    expect(doc.components.responses.ModelError.content['application/json'].schema.$ref).toBe('#/components/schemas/ModelError');
    const bad: string[] = [];
    for (const { path, method, op } of operations()) {
      const errors = Object.entries(op.responses ?? {}).filter(([status]) => /^[45]/.test(status));
      if (!errors.length) bad.push(`${method} ${path}: no error responses`);
      const want = path.startsWith('/v1') ? '#/components/responses/ModelError' : '#/components/responses/ApiError';
      for (const [status, r] of errors as [string, any][]) if (r.$ref !== want || !r.description) bad.push(`${method} ${path} ${status}`);
    }
    expect(bad).toEqual([]);
    // Statuses an operation documents itself keep their own meaning.
    expect(doc.paths['/v1/messages'].post.responses['402']).toEqual({ $ref: '#/components/responses/ModelError', description: 'Quota exhausted' });
  });

  test('request and response schemas are named in components.schemas and referenced, not repeated', () => {
    const names = ['MessagesRequest', 'Message', 'ModelPage', 'ModelInfo', 'ChannelCreate', 'ChannelUpdate', 'ChannelView', 'UserCreate', 'UserView', 'ApiKeyView', 'PriceView', 'UsageLogView', 'TopupOrderView', 'LedgerEntryView'];
    const text = JSON.stringify(doc.paths);
    for (const name of names) {
      expect({ name, declared: !!doc.components.schemas[name] }).toEqual({ name, declared: true });
      expect({ name, referenced: text.includes(`"#/components/schemas/${name}"`) }).toEqual({ name, referenced: true });
    }
    expect(doc.paths['/v1/messages'].post.requestBody.content['application/json'].schema).toEqual({ $ref: '#/components/schemas/MessagesRequest' });
    expect(doc.components.schemas.ModelPage.properties.data.items).toEqual({ $ref: '#/components/schemas/ModelInfo' });
    // UserView is used by many operations but described once.
    expect(text).not.toContain('"display_name":{"description"');
  });

  test('the core requests carry an example', () => {
    const core = ['post /v1/messages', 'post /api/channel/batch', 'post /api/channel/tag/enabled', 'put /api/channel/', 'post /api/user/',
      'post /api/user/2fa/disable', 'post /api/user/reset', 'post /api/providerA/webhook', 'post /api/providerB/webhook'];
    for (const k of core) {
      const [method, path] = k.split(' ') as [string, string];
      const example = doc.paths[path][method].requestBody?.content?.['application/json']?.example;
      expect({ k, example: typeof example === 'object' && example !== null }).toEqual({ k, example: true });
    }
    expect(doc.paths['/api/channel/batch'].post.requestBody.content['application/json'].example.ids.length).toBeGreaterThan(0);
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
    // Everything the page and its bundle load is served here: no absolute URL in the page, and the assets
    // it names all answer, so the UI renders on a machine with no network.
    const referenced = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
    expect(referenced.length).toBeGreaterThanOrEqual(3);
    for (const ref of referenced) {
      expect(ref.startsWith('/')).toBe(true);
      expect({ ref, status: (await fetch(gw.url + ref)).status }).toEqual({ ref, status: 200 });
    }
    expect((await fetch(`${gw.url}/openapi/assets/index.html`)).status).toBe(404);
  });
});

test('pricing and channel schemas document the cache-write tiers, the long-context tier and the header policy', () => {
  const price = inline(doc.paths['/api/pricing/'].put.requestBody.content['application/json'].schema).properties;
  for (const f of ['cache_write_1h', 'long_context_threshold', 'long_context']) expect(price[f]).toBeDefined();
  const channel = inline(doc.paths['/api/channel/'].post.requestBody.content['application/json'].schema).properties;
  expect(Object.keys(channel.header_policy.properties).sort()).toEqual(['allow_service_tier', 'beta_rewrite', 'beta_strip', 'forward_headers']);
});

test('a request body is documented as required exactly where the server refuses its absence for a missing field', async () => {
  const wrong: string[] = [];
  let optional = 0;
  for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
    if (!path.startsWith('/api/') || path.endsWith('/webhook')) continue;
    for (const [method, op] of Object.entries(ops)) {
      if (!op?.requestBody) continue;
      // Ids that exist nowhere: a body-less request that gets past validation changes nothing.
      const res = await gw.api(method.toUpperCase(), path.replace(/\{[^}]+\}/g, '999999'));
      const refusedMissing = res.status === 400 && res.body.error?.code === 'missing_field';
      if (op.requestBody.required !== refusedMissing) wrong.push(`${method} ${path}: documented required=${op.requestBody.required}, answered ${res.status} ${res.body.error?.code}`);
      if (op.requestBody.required === false) optional++;
    }
  }
  expect(wrong).toEqual([]);
  expect(optional).toBeGreaterThanOrEqual(4); // PUT /api/user/self, ending a session or a token, reinstating an order
}, 30_000);
