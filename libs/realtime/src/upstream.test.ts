import { expect, test } from 'bun:test';
import { getAdapter } from '@gw/providers';
import { adapterResolver } from './upstream';

const ch = (type: string, baseUrl = 'https://api.example.com') => ({
  id: 1, type, baseUrl, apiKey: 'up-key', models: ['m'], modelMapping: {}, groups: ['default'], priority: 0, weight: 1, headers: { 'x-extra': '1' },
});

test('OpenAI channels speak realtime: wss URL with the mapped model, Bearer channel key and channel headers', () => {
  const r = adapterResolver(getAdapter);
  expect(r.supports(ch('openai'))).toBe(true);
  expect(r.url(ch('openai'), 'gpt-realtime-2025')).toBe('wss://api.example.com/v1/realtime?model=gpt-realtime-2025');
  expect(r.url(ch('openai', 'http://127.0.0.1:9999/'), 'a b')).toBe('ws://127.0.0.1:9999/v1/realtime?model=a+b');
  expect(r.headers(ch('openai'), 'm')).toMatchObject({ authorization: 'Bearer up-key', 'x-extra': '1' });
});

test('channels without a realtime endpoint (anthropic, unknown types) are not realtime candidates', () => {
  const r = adapterResolver(getAdapter);
  expect(r.supports(ch('anthropic'))).toBe(false);
  expect(r.supports(ch('no-such-type'))).toBe(false);
});
