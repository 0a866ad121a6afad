import { describe, expect, test } from 'bun:test';
import { GatewayError } from '@gw/core';
import { normalizeOverrides, type OverrideInput } from './overrides';
import { compileOverrides, probeRequest } from './override-program';

const refusal = (list: unknown[]) => {
  try {
    normalizeOverrides(list as OverrideInput[]);
  } catch (e) {
    expect(e).toBeInstanceOf(GatewayError);
    return { status: (e as GatewayError).status, param: (e as GatewayError).param, message: (e as GatewayError).message };
  }
  throw new Error(`accepted: ${JSON.stringify(list)}`);
};

describe('normalizeOverrides', () => {
  test('accepts each op and keeps only its fields; header names lower-cased', () => {
    expect(normalizeOverrides([
      { op: 'set', path: 'temperature', value: 0.5 },
      { op: 'remove', path: 'top_k', models: ['claude-*', ' a '] },
      { op: 'clamp', path: 'max_tokens', max: 1024 },
      { op: 'set', path: 'thinking.budget_tokens', value: 2048 },
      { op: 'set_header', name: 'X-Team', value: 'blue' },
      { op: 'remove_header', name: 'User-Agent' },
      { op: 'set', path: 'container', value: { id: 'c1' } },
    ])).toEqual([
      { op: 'set', path: 'temperature', value: 0.5 },
      { op: 'remove', path: 'top_k', models: ['claude-*', 'a'] },
      { op: 'clamp', path: 'max_tokens', max: 1024 },
      { op: 'set', path: 'thinking.budget_tokens', value: 2048 },
      { op: 'set_header', name: 'x-team', value: 'blue' },
      { op: 'remove_header', name: 'user-agent' },
      { op: 'set', path: 'container', value: { id: 'c1' } },
    ]);
  });

  test('refuses what it cannot apply safely, naming the entry and field', () => {
    const cases: Array<[unknown, string, RegExp]> = [
      [{ op: 'set', path: 'model', value: 'x' }, 'overrides[0].path', /model_mapping/],
      [{ op: 'remove', path: 'messages' }, 'overrides[0].path', /conversation/],
      [{ op: 'set', path: 'stream', value: false }, 'overrides[0].path', /format/],
      [{ op: 'set', path: 'service_tier', value: 'priority' }, 'overrides[0].path', /allow_service_tier/],
      [{ op: 'set', path: 'inference_geo', value: 'us' }, 'overrides[0].path', /allow_service_tier/],
      [{ op: 'remove', path: 'max_tokens' }, 'overrides[0].path', /required/],
      [{ op: 'remove', path: 'thinking.type' }, 'overrides[0].path', /required/],
      [{ op: 'set', path: 'temperature', value: 3 }, 'overrides[0].value', /temperature/],
      [{ op: 'set', path: 'max_tokens', value: '100' }, 'overrides[0].value', /max_tokens/],
      [{ op: 'set', path: 'temperature' }, 'overrides[0].value', /needs a value/],
      [{ op: 'clamp', path: 'max_tokens', max: 0 }, 'overrides[0].max', /max_tokens/],
      [{ op: 'clamp', path: 'max_tokens', max: 10.5 }, 'overrides[0].max', /max_tokens/],
      [{ op: 'clamp', path: 'temperature', min: 0.8, max: 0.2 }, 'overrides[0].min', /above max/],
      [{ op: 'clamp', path: 'stop_sequences', max: 2 }, 'overrides[0].path', /not a number/],
      [{ op: 'clamp', path: 'top_k' }, 'overrides[0]', /min, max/],
      [{ op: 'set', path: 'temperature.x', value: 1 }, 'overrides[0].path', /not an object/],
      [{ op: 'set', path: 'metadata.__proto__', value: 1 }, 'overrides[0].path', /not a field path/],
      [{ op: 'set', path: 'a..b', value: 1 }, 'overrides[0].path', /not a field path/],
      [{ op: 'set', path: 'a.b.c.d.e', value: 1 }, 'overrides[0].path', /not a field path/],
      [{ op: 'remove', path: 'top_k', value: 1 }, 'overrides[0].value', /does not apply to remove/],
      [{ op: 'remove' }, 'overrides[0].path', /needs a path/],
      [{ op: 'remove', path: 'temperature', model: ['x'] }, 'overrides[0].model', /unknown field/],
      [{ op: 'set', path: 'x', value: 'y'.repeat(20_000) }, 'overrides[0].value', /bytes/],
      [{ op: 'set_header', name: 'authorization', value: 'x' }, 'overrides[0].name', /credential/],
      [{ op: 'remove_header', name: 'X-Api-Key' }, 'overrides[0].name', /credential/],
      [{ op: 'set_header', name: 'host', value: 'x' }, 'overrides[0].name', /hop-by-hop/],
      [{ op: 'set_header', name: 'anthropic-beta', value: 'context-1m-2025-08-07' }, 'overrides[0].name', /protocol/],
      [{ op: 'remove_header', name: 'anthropic-version' }, 'overrides[0].name', /protocol/],
      [{ op: 'set_header', name: 'x-secret-token', value: 'abc' }, 'overrides[0].name', /looks like a credential/],
      [{ op: 'set_header', name: 'x-team', value: 'sk1Ab2Cd3Ef4Gh5Ij6Kl7Mn8' }, 'overrides[0].name', /looks like a credential/],
      [{ op: 'set_header', name: 'x-team', value: 'a\r\nb' }, 'overrides[0].value', /line breaks/],
      [{ op: 'set_header', name: 'x-team' }, 'overrides[0].value', /string/],
      [{ op: 'set_header', name: 'bad name', value: 'v' }, 'overrides[0].name', /valid header/],
      [{ op: 'remove', path: 'top_k', models: ['a*b'] }, 'overrides[0].models[0]', /prefix/],
    ];
    for (const [entry, param, message] of cases) {
      const r = refusal([entry]);
      expect({ entry, param: r.param }).toEqual({ entry, param });
      expect(r.status).toBe(400);
      expect(r.message).toMatch(message);
    }
    expect(refusal([{ op: 'remove', path: 'top_p' }, { op: 'set', path: 'model', value: 'x' }]).param).toBe('overrides[1].path');
    expect(refusal(Array.from({ length: 51 }, () => ({ op: 'remove', path: 'top_p' }))).param).toBe('overrides');
  });
});

describe('compiled program', () => {
  const body = () => ({ model: 'claude-a', max_tokens: 4000, temperature: 0.7, thinking: { type: 'enabled', budget_tokens: 3000 }, messages: [{ role: 'user', content: 'Hi' }] });

  test('no entries: no program at all', () => {
    expect(compileOverrides([], ['m'], {})).toBeNull();
  });

  test('set, remove, clamp: copy-on-write, only real changes reported', () => {
    const p = compileOverrides(normalizeOverrides([
      { op: 'clamp', path: 'max_tokens', max: 1000 },
      { op: 'remove', path: 'temperature' },
      { op: 'remove', path: 'top_k' },
      { op: 'set', path: 'thinking.budget_tokens', value: 500 },
      { op: 'set', path: 'metadata.user_id', value: 'u' },
      { op: 'set', path: 'top_p', value: 0.9 },
      { op: 'clamp', path: 'top_p', min: 0.1, max: 0.95 },
    ]), ['claude-a'], {})!;
    const b = body();
    const snapshot = structuredClone(b);
    const changed: string[] = [];
    const out = p.forModel('claude-a')!.applyBody(b, changed);
    expect(b).toEqual(snapshot);
    expect(out).toEqual({ model: 'claude-a', max_tokens: 1000, thinking: { type: 'enabled', budget_tokens: 500 }, top_p: 0.9, messages: b.messages } as any);
    expect(out.messages).toBe(b.messages);
    expect(changed).toEqual(['clamp:max_tokens', 'remove:temperature', 'set:thinking.budget_tokens', 'set:top_p']);
    // Nothing to change: the same object comes back.
    const again: string[] = [];
    expect(p.forModel('claude-a')!.applyBody(out, again)).toBe(out);
    expect(again).toEqual([]);
  });

  test('a set value is never shared between requests', () => {
    const p = compileOverrides([{ op: 'set', path: 'metadata', value: { user_id: 'fixed' } }], ['m'], {})!;
    const a = p.forModel('m')!.applyBody(body(), []) as any;
    a.metadata.user_id = 'mutated';
    expect((p.forModel('m')!.applyBody(body(), []) as any).metadata.user_id).toBe('fixed');
  });

  test('models: exact or prefix, matched on the requested or the upstream name', () => {
    const p = compileOverrides([
      { op: 'remove', path: 'temperature', models: ['claude-*'] },
      { op: 'clamp', path: 'max_tokens', max: 10, models: ['gpt-up'] },
    ], ['claude-a', 'alias', 'other'], { alias: 'gpt-up' })!;
    const run = (m: string) => { const c: string[] = []; p.forModel(m)?.applyBody(body(), c); return c; };
    expect(run('claude-a')).toEqual(['remove:temperature']);
    expect(run('alias')).toEqual(['clamp:max_tokens']);
    expect(p.forModel('other')).toBeNull();
    expect(p.forModel('claude-z')).not.toBeNull(); // a model added later still matches its pattern
  });

  test('headers: set wins over a forwarded value, remove drops both; unchanged ones not reported', () => {
    const p = compileOverrides(normalizeOverrides([
      { op: 'set_header', name: 'x-team', value: 'blue' },
      { op: 'set_header', name: 'x-same', value: 'v' },
      { op: 'remove_header', name: 'user-agent' },
      { op: 'remove_header', name: 'x-absent' },
    ]), ['m'], {})!;
    const input = { extra: { 'x-same': 'v' }, forwarded: { 'user-agent': 'cli/1', 'x-team': 'red' } };
    const changed: string[] = [];
    const out = p.forModel('m')!.applyHeaders(input, changed);
    expect(out).toEqual({ extra: { 'x-same': 'v', 'x-team': 'blue' }, forwarded: { 'x-team': 'red' } });
    expect(input).toEqual({ extra: { 'x-same': 'v' }, forwarded: { 'user-agent': 'cli/1', 'x-team': 'red' } });
    expect(changed).toEqual(['set_header:x-team', 'remove_header:user-agent']);
  });

  test('touchesInput only for measured fields', () => {
    expect(compileOverrides([{ op: 'clamp', path: 'max_tokens', max: 1 }], ['m'], {})!.forModel('m')!.touchesInput).toBe(false);
    expect(compileOverrides([{ op: 'set', path: 'system', value: 'Be brief.' }], ['m'], {})!.forModel('m')!.touchesInput).toBe(true);
  });

  test('probe request: overrides applied except on max_tokens; none = the plain probe', () => {
    const program = compileOverrides(normalizeOverrides([
      { op: 'set', path: 'max_tokens', value: 9000 }, { op: 'set', path: 'temperature', value: 0 }, { op: 'set_header', name: 'x-team', value: 'blue' },
    ]), ['m'], {});
    expect(probeRequest({ overrides: program, headers: { 'x-a': '1' } }, 'm')).toEqual({
      body: { model: 'm', max_tokens: 1, temperature: 0, messages: [{ role: 'user', content: 'ping' }] } as any,
      extraHeaders: { 'x-a': '1', 'x-team': 'blue' },
    });
    expect(probeRequest({ overrides: null, headers: {} }, 'm').body).toEqual({ model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'ping' }] });
  });
});
