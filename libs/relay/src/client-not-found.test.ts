import { describe, expect, test } from 'bun:test';
import type { MessagesRequest } from '@gw/formats';
import { namesUpstreamObjects } from './client-not-found';

const req = (content: unknown, extra: Record<string, unknown> = {}) =>
  ({ model: 'm', max_tokens: 1, messages: [{ role: 'user', content }], ...extra }) as unknown as MessagesRequest;
const file = { type: 'image', source: { type: 'file', file_id: 'file_1' } };

describe('namesUpstreamObjects', () => {
  test('ids the client chose: file sources (also inside a tool result), container_upload, container', () => {
    expect(namesUpstreamObjects(req([file]))).toBe(true);
    expect(namesUpstreamObjects(req([{ type: 'tool_result', tool_use_id: 't', content: [file] }]))).toBe(true);
    expect(namesUpstreamObjects(req([{ type: 'container_upload', file_id: 'file_1' }]))).toBe(true);
    expect(namesUpstreamObjects(req('hi', { container: 'container_1' }))).toBe(true);
    expect(namesUpstreamObjects(req('hi', { container: { skills: [{ type: 'custom', skill_id: 'skill_1' }] } }))).toBe(true);
  });

  test('nothing named by id: inline data and URLs, an empty or null container, plain text', () => {
    expect(namesUpstreamObjects(req('hi'))).toBe(false);
    expect(namesUpstreamObjects(req([{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }, { type: 'document', source: { type: 'url', url: 'https://x' } }]))).toBe(false);
    expect(namesUpstreamObjects(req('hi', { container: '' }))).toBe(false);
    expect(namesUpstreamObjects(req('hi', { container: null }))).toBe(false);
  });

  test('bounded: a file source past the first 4096 blocks is not looked for', () => {
    const many = Array.from({ length: 4096 }, () => ({ type: 'text', text: 'x' }));
    expect(namesUpstreamObjects(req([...many.slice(1), file]))).toBe(true);
    expect(namesUpstreamObjects(req([...many, file]))).toBe(false);
  });
});
