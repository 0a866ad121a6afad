import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

const base = (extra: Record<string, unknown> = {}) => ({
  name: 'primary', type: 'anthropic', base_url: 'https://api.anthropic.com/', key: 'sk-ant-secret-value-123', models: ['claude-a', 'claude-b'], ...extra,
});
const create = async (extra: Record<string, unknown> = {}) => {
  const r = await gw.api('POST', '/api/channel/', base(extra));
  expect(r.status).toBe(200);
  return r.body.data;
};

describe('channels', () => {
  test('create stores the key sealed, shows it masked, normalises base_url, applies defaults', async () => {
    const c = await create({ model_mapping: { 'claude-a': 'claude-a-2025' }, headers: { 'X-Extra': 'v' } });
    expect(c).toMatchObject({
      name: 'primary', type: 'anthropic', base_url: 'https://api.anthropic.com', models: ['claude-a', 'claude-b'],
      model_mapping: { 'claude-a': 'claude-a-2025' }, group: 'default', tag: '', priority: 0, weight: 1, status: 1,
      status_reason: '', timeout_ms: 300000, headers: { 'x-extra': 'v' }, response_time_ms: 0, tested_at: null,
    });
    expect(c.key).not.toContain('secret-value');
    expect(c.key).toBe('sk-a…-123');
    const raw = (await gw.db.get('select key from channels where id = ?', c.id)) as { key: string };
    expect(raw.key.startsWith('v1.')).toBe(true);
    expect(raw.key).not.toContain('secret');
    // The relay's snapshot holds the decrypted key.
    expect(gw.services.channelRegistry.get(c.id)?.apiKey).toBe('sk-ant-secret-value-123');
  });

  test('get, list with paging, filters and keyword search', async () => {
    const a = await create({ name: 'Alpha-east', tag: 'east', type: 'openai', models: ['gpt-x'], group: 'vip,default' });
    const b = await create({ name: 'beta-west', tag: 'west', models: ['claude-z'] });
    expect((await gw.api('GET', `/api/channel/${a.id}`)).body.data.name).toBe('Alpha-east');
    const byTag = await gw.api('GET', '/api/channel/?tag=east');
    expect(byTag.body.data.items.map((c: any) => c.id)).toEqual([a.id]);
    expect((await gw.api('GET', '/api/channel/?type=openai')).body.data.items.map((c: any) => c.id)).toContain(a.id);
    expect((await gw.api('GET', '/api/channel/?model=claude-z')).body.data.items.map((c: any) => c.id)).toEqual([b.id]);
    expect((await gw.api('GET', '/api/channel/?group=vip')).body.data.items.map((c: any) => c.id)).toEqual([a.id]);
    expect((await gw.api('GET', '/api/channel/?keyword=ALPHA')).body.data.items.map((c: any) => c.id)).toEqual([a.id]);
    // A keyword with LIKE wildcards matches literally.
    expect((await gw.api('GET', '/api/channel/?keyword=%25')).body.data.total).toBe(0);
    const p1 = await gw.api('GET', '/api/channel/?p=1&page_size=1');
    expect(p1.body.data).toMatchObject({ page: 1, page_size: 1 });
    expect(p1.body.data.items).toHaveLength(1);
    expect(p1.body.data.total).toBeGreaterThanOrEqual(2);
    const p2 = await gw.api('GET', '/api/channel/?p=2&page_size=1');
    expect(p2.body.data.items[0].id).not.toBe(p1.body.data.items[0].id);
  });

  test('PUT is partial: only present fields change, empty key keeps the stored key', async () => {
    const c = await create({ name: 'partial', priority: 3, tag: 't1' });
    const r = await gw.api('PUT', '/api/channel/', { id: c.id, priority: 9, key: '' });
    expect(r.status).toBe(200);
    expect(r.body.data).toMatchObject({ name: 'partial', priority: 9, tag: 't1', models: ['claude-a', 'claude-b'] });
    expect(gw.services.channelRegistry.get(c.id)?.apiKey).toBe('sk-ant-secret-value-123');
    await gw.api('PUT', '/api/channel/', { id: c.id, key: 'sk-new-key-000000' });
    expect(gw.services.channelRegistry.get(c.id)?.apiKey).toBe('sk-new-key-000000');
    expect(gw.services.channelRegistry.get(c.id)?.priority).toBe(9);
    const missing = await gw.api('PUT', '/api/channel/', { id: 999999, name: 'x' });
    expect(missing.status).toBe(404);
    expect(missing.body.error).toMatchObject({ code: 'channel_not_found', param: 'id' });
  });

  test('status: disabling removes a channel from routing, enabling puts it back', async () => {
    const c = await create({ models: ['route-model'], priority: 5 });
    const low = await create({ models: ['route-model'], priority: 1 });
    expect(gw.services.channelRegistry.candidates('route-model', 'default').map((x) => x.id)).toEqual([c.id, low.id]);
    expect(gw.services.channelRegistry.models('default')).toContain('route-model');
    await gw.api('PUT', '/api/channel/', { id: c.id, status: 2 });
    expect((await gw.api('GET', `/api/channel/${c.id}`)).body.data.status).toBe(2);
    expect(gw.services.channelRegistry.candidates('route-model', 'default').map((x) => x.id)).toEqual([low.id]);
    await gw.api('PUT', '/api/channel/', { id: c.id, status: 1 });
    expect(gw.services.channelRegistry.candidates('route-model', 'default').map((x) => x.id)).toEqual([c.id, low.id]);
    // The health checker's auto-disable (3) never overrides an operator's disable (2).
    await gw.api('PUT', '/api/channel/', { id: c.id, status: 2 });
    await gw.services.channels.setStatus(c.id, 1, 'probe ok');
    expect((await gw.api('GET', `/api/channel/${c.id}`)).body.data.status).toBe(2);
    await gw.services.channels.setStatus(low.id, 3, 'upstream 500 x3');
    expect((await gw.api('GET', `/api/channel/${low.id}`)).body.data).toMatchObject({ status: 3, status_reason: 'upstream 500 x3' });
    expect(gw.services.channelRegistry.candidates('route-model', 'default')).toEqual([]);
  });

  test('tag/enabled and tag/disabled change every channel with the tag', async () => {
    const tag = `batch-${crypto.randomUUID().slice(0, 6)}`;
    const ids = [(await create({ tag })).id, (await create({ tag })).id, (await create({ tag, status: 2 })).id];
    const off = await gw.api('POST', '/api/channel/tag/disabled', { tag });
    expect(off.body).toEqual({ success: true, message: '', data: { updated: 3 } });
    for (const id of ids) expect((await gw.api('GET', `/api/channel/${id}`)).body.data.status).toBe(2);
    const on = await gw.api('POST', '/api/channel/tag/enabled', { tag });
    expect(on.body.data).toEqual({ updated: 3 });
    for (const id of ids) expect((await gw.api('GET', `/api/channel/${id}`)).body.data.status).toBe(1);
    expect((await gw.api('POST', '/api/channel/tag/enabled', { tag: 'no-such-tag' })).body.data).toEqual({ updated: 0 });
  });

  test('delete one and batch delete', async () => {
    const a = await create();
    const b = await create();
    const c = await create();
    expect((await gw.api('DELETE', `/api/channel/${a.id}`)).status).toBe(200);
    expect((await gw.api('GET', `/api/channel/${a.id}`)).status).toBe(404);
    expect((await gw.api('DELETE', `/api/channel/${a.id}`)).status).toBe(404);
    expect(gw.services.channelRegistry.get(a.id)).toBeUndefined();
    const r = await gw.api('POST', '/api/channel/batch', { ids: [b.id, c.id, a.id, 987654] });
    expect(r.body).toEqual({ success: true, message: '', data: { deleted: 2 } });
    expect(gw.services.channelRegistry.get(b.id)).toBeUndefined();
  });

  test('field validation names the field', async () => {
    const cases: Array<[Record<string, unknown>, string, string?]> = [
      [{ base_url: 'https://api.openai.com/v1' }, 'base_url', 'without /v1'],
      [{ base_url: 'https://api.openai.com/v1/' }, 'base_url'],
      [{ base_url: 'ftp://x.example' }, 'base_url'],
      [{ base_url: 'not a url' }, 'base_url'],
      [{ base_url: 'https://user:pw@x.example' }, 'base_url'],
      [{ type: 'gemini' }, 'type', "'anthropic', 'openai' or 'openai-legacy'"],
      [{ models: [] }, 'models'],
      [{ models: ['ok', ''] }, 'models[1]'],
      [{ models: 'claude' }, 'models'],
      [{ key: '' }, 'key'],
      [{ name: '' }, 'name'],
      [{ name: '   ' }, 'name'],
      [{ weight: 0 }, 'weight'],
      [{ weight: 10001 }, 'weight'],
      [{ priority: 1.5 }, 'priority'],
      [{ priority: '5' }, 'priority'],
      [{ status: 3 }, 'status'],
      [{ timeout_ms: 10 }, 'timeout_ms'],
      [{ group: 'a,,b' }, 'group'],
      [{ headers: { Authorization: 'Bearer x' } }, 'headers.Authorization'],
      [{ headers: { Connection: 'close' } }, 'headers.Connection'],
      [{ headers: { 'bad header': 'x' } }, 'headers.bad header'],
      [{ headers: { 'x-a': 'line\nbreak' } }, 'headers.x-a'],
      [{ model_mapping: { a: 1 } }, 'model_mapping.a'],
    ];
    for (const [patch, param, text] of cases) {
      const r = await gw.api('POST', '/api/channel/', base(patch));
      expect({ patch, status: r.status, param: r.body.error?.param }).toEqual({ patch, status: 400, param });
      if (text) expect(r.body.error.message).toContain(text);
    }
    const missing = await gw.api('POST', '/api/channel/', { name: 'x', type: 'openai', base_url: 'https://x.example', key: 'k' });
    expect(missing.status).toBe(400);
    expect(missing.body.error).toMatchObject({ code: 'missing_field', param: 'models' });
    const malformed = await gw.api('PUT', '/api/channel/', '{"id": 1, ');
    expect(malformed.body.error).toMatchObject({ code: 'invalid_json' });
    expect((await gw.api('POST', '/api/channel/', 'name=x', undefined, { 'content-type': 'text/plain' })).status).toBe(415);
    expect((await gw.api('PUT', '/api/channel/', { id: 0 })).body.error.param).toBe('id');
    expect((await gw.api('PUT', '/api/channel/', { id: 1, weight: '5' })).body.error.param).toBe('weight');
    const batch = await gw.api('POST', '/api/channel/batch', { ids: [] });
    expect(batch.body.error.param).toBe('ids');
    const tooMany = await gw.api('POST', '/api/channel/batch', { ids: Array.from({ length: 1001 }, (_, i) => i + 1) });
    expect(tooMany.body.error.param).toBe('ids');
    expect((await gw.api('POST', '/api/channel/batch', { ids: ['1'] })).body.error.param).toBe('ids[0]');
    expect((await gw.api('POST', '/api/channel/tag/enabled', {})).body.error).toMatchObject({ code: 'missing_field', param: 'tag' });
    expect((await gw.api('GET', '/api/channel/abc')).status).toBe(400);
    // Out-of-range query values are 400 (Elysia's coerced query validator does not report the field path).
    const q = await gw.api('GET', '/api/channel/?status=9');
    expect(q.status).toBe(400);
    expect(q.body.error.code).toBe('out_of_range');
    expect(q.body.error.message).toContain('status must be 1, 2 or 3');
    expect((await gw.api('GET', '/api/channel/?status=x')).body.error.param).toBe('status');
  });

  test('unknown fields are ignored and a path prefix in base_url is kept', async () => {
    const c = await create({ base_url: 'https://proxy.example/api//', surprise: 'ignored' });
    expect(c.base_url).toBe('https://proxy.example/api');
    expect(c).not.toHaveProperty('surprise');
  });

  test('test sends one real request through the adapter, records the time, and never re-enables', async () => {
    const seen: Array<{ path: string; key: string | null; extra: string | null; body: any }> = [];
    let fail = false;
    const upstream = Bun.serve({
      port: 0, hostname: '127.0.0.1',
      async fetch(req) {
        seen.push({ path: new URL(req.url).pathname, key: req.headers.get('x-api-key'), extra: req.headers.get('x-extra'), body: await req.json() });
        if (fail) return Response.json({ type: 'error', error: { type: 'authentication_error', message: 'bad key' } }, { status: 401 });
        return Response.json({ id: 'msg_1', type: 'message', role: 'assistant', model: 'up-model', content: [{ type: 'text', text: 'p' }], stop_reason: 'max_tokens', usage: { input_tokens: 1, output_tokens: 1 } });
      },
    });
    try {
      const c = await create({ base_url: `http://127.0.0.1:${upstream.port}`, models: ['claude-t'], model_mapping: { 'claude-t': 'up-model' }, headers: { 'x-extra': 'yes' } });
      const r = await gw.api('POST', `/api/channel/${c.id}/test`);
      expect(r.status).toBe(200);
      expect(r.body.data).toMatchObject({ success: true, status: 200, message: '' });
      expect(seen).toHaveLength(1);
      expect(seen[0]).toMatchObject({ path: '/v1/messages', key: 'sk-ant-secret-value-123', extra: 'yes', body: { model: 'up-model', max_tokens: 1 } });
      const after = (await gw.api('GET', `/api/channel/${c.id}`)).body.data;
      expect(after.tested_at).toBe(r.body.data.tested_at);
      expect(after.response_time_ms).toBe(r.body.data.response_time_ms);
      // A failing upstream is reported, and a manually disabled channel stays disabled either way.
      await gw.api('PUT', '/api/channel/', { id: c.id, status: 2 });
      fail = true;
      const bad = await gw.api('POST', `/api/channel/${c.id}/test`);
      expect(bad.body.data).toMatchObject({ success: false, status: 401 });
      expect(bad.body.data.message).not.toContain('secret-value');
      fail = false;
      expect((await gw.api('POST', `/api/channel/${c.id}/test`)).body.data.success).toBe(true);
      expect((await gw.api('GET', `/api/channel/${c.id}`)).body.data.status).toBe(2);
      expect((await gw.api('POST', `/api/channel/${c.id}/test?model=not-served`)).body.error.param).toBe('model');
      expect((await gw.api('POST', '/api/channel/999999/test')).status).toBe(404);
    } finally {
      upstream.stop(true);
    }
    // Unreachable upstream: a result, not a 5xx.
    const dead = await create({ base_url: 'http://127.0.0.1:9', models: ['m'] });
    const r = await gw.api('POST', `/api/channel/${dead.id}/test`);
    expect(r.status).toBe(200);
    expect(r.body.data).toMatchObject({ success: false, status: 0 });
  });
});
