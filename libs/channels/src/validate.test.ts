import { describe, expect, test } from 'bun:test';
import { GatewayError } from '@gw/core';
import { normalizeBaseUrl, normalizeHeaders, normalizeMapping, normalizeModels } from './validate';

const paramOf = (fn: () => unknown) => {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(GatewayError);
    expect((e as GatewayError).status).toBe(400);
    return (e as GatewayError).param;
  }
  throw new Error('expected a GatewayError');
};

describe('normalizeBaseUrl', () => {
  test('keeps origin and path prefix, strips trailing slashes', () => {
    expect(normalizeBaseUrl('https://api.anthropic.com/')).toBe('https://api.anthropic.com');
    expect(normalizeBaseUrl(' http://127.0.0.1:8080 ')).toBe('http://127.0.0.1:8080');
    expect(normalizeBaseUrl('https://proxy.example/openai//')).toBe('https://proxy.example/openai');
  });
  test('refuses /v1, other schemes, credentials, query and fragment', () => {
    for (const bad of ['https://api.openai.com/v1', 'https://api.openai.com/V1/', 'https://x.example/api/v1', 'ftp://x.example', 'x.example', 'https://u:p@x.example', 'https://x.example?a=1', 'https://x.example#f']) {
      expect({ bad, param: paramOf(() => normalizeBaseUrl(bad)) }).toEqual({ bad, param: 'base_url' });
    }
  });
});

describe('normalizeHeaders', () => {
  test('lower-cases names and trims values', () => {
    expect(normalizeHeaders({ 'X-Org': ' acme ', 'anthropic-beta': 'x' })).toEqual({ 'x-org': 'acme', 'anthropic-beta': 'x' });
  });
  test('refuses hop-by-hop, credential, invalid and duplicate headers', () => {
    for (const name of ['Connection', 'transfer-encoding', 'Host', 'Authorization', 'x-api-key', 'Proxy-Authorization', 'Upgrade', 'content-length', 'Cookie']) {
      expect(paramOf(() => normalizeHeaders({ [name]: 'v' }))).toBe(`headers.${name}`);
    }
    expect(paramOf(() => normalizeHeaders({ 'a b': 'v' }))).toBe('headers.a b');
    expect(paramOf(() => normalizeHeaders({ 'x-a': 'v\r\nx-b: 1' }))).toBe('headers.x-a');
    expect(paramOf(() => normalizeHeaders({ 'X-A': '1', 'x-a': '2' }))).toBe('headers.x-a');
  });
});

describe('models and mapping', () => {
  test('models are trimmed and de-duplicated; blanks refused', () => {
    expect(normalizeModels([' a ', 'a', 'b'])).toEqual(['a', 'b']);
    expect(paramOf(() => normalizeModels(['a', ' ']))).toBe('models[1]');
  });
  test('mapping keys and values must be non-blank', () => {
    expect(normalizeMapping({ ' a ': ' b ' })).toEqual({ a: 'b' });
    expect(paramOf(() => normalizeMapping({ a: ' ' }))).toBe('model_mapping.a');
  });
});
