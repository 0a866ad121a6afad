import { describe, expect, test } from 'bun:test';
import { classifyTransportError, classifyUpstreamError, scrub } from './errors';
import { isCredentialHeader, scrubberFor } from './scrubber';

const h = (o: Record<string, string> = {}) => new Headers(o);
const row = (status: number, body = '', headers = h()) => {
  const c = classifyUpstreamError(status, body, headers);
  return [c.kind, c.retryable, c.error.status, c.error.type, c.error.code];
};

describe('classifyUpstreamError', () => {
  test('status table', () => {
    expect(row(400)).toEqual(['invalid_request', false, 400, 'invalid_request_error', 'upstream_invalid_request']);
    expect(row(422)).toEqual(['invalid_request', false, 400, 'invalid_request_error', 'upstream_invalid_request']);
    expect(row(401)).toEqual(['auth', true, 502, 'api_error', 'upstream_auth_failed']);
    expect(row(403)).toEqual(['auth', true, 502, 'api_error', 'upstream_auth_failed']);
    expect(row(404)).toEqual(['not_found', true, 502, 'api_error', 'upstream_not_found']);
    expect(row(408)).toEqual(['timeout', true, 504, 'timeout_error', 'upstream_timeout']);
    expect(row(409)).toEqual(['server', true, 502, 'api_error', 'upstream_error']);
    expect(row(413)).toEqual(['too_large', false, 413, 'request_too_large', 'request_too_large']);
    expect(row(429)).toEqual(['rate_limit', true, 429, 'rate_limit_error', 'upstream_rate_limited']);
    expect(row(500)).toEqual(['server', true, 502, 'api_error', 'upstream_error']);
    expect(row(503)).toEqual(['overloaded', true, 503, 'overloaded_error', 'upstream_overloaded']);
    expect(row(529)).toEqual(['overloaded', true, 503, 'overloaded_error', 'upstream_overloaded']);
  });

  test('x-should-retry overrides; retry-after kept only when it is a number of seconds', () => {
    expect(classifyUpstreamError(500, '', h({ 'x-should-retry': 'false' })).retryable).toBe(false);
    expect(classifyUpstreamError(400, '', h({ 'x-should-retry': 'true' })).retryable).toBe(true);
    expect(classifyUpstreamError(429, '', h({ 'retry-after': '12' })).error.headers).toEqual({ 'retry-after': '12' });
    expect(classifyUpstreamError(429, '', h({ 'retry-after': 'Wed, 21 Oct 2015 07:28:00 GMT' })).error.headers).toEqual({});
  });

  test('only a bad request carries upstream text, scrubbed; auth failures never do', () => {
    const bad = classifyUpstreamError(400, JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', message: 'messages.1: tool_use ids must be unique' } }), h());
    expect(bad.error.message).toBe('The upstream rejected the request: messages.1: tool_use ids must be unique');
    // Anthropic's context-window wording passes as it is (clients match on it; see contextWindowMessage).
    const long = classifyUpstreamError(400, JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', message: 'prompt is too long: 300000 tokens > 200000 maximum' } }), h());
    expect(long.error).toMatchObject({ status: 400, code: 'prompt_too_long', message: 'prompt is too long: 300000 tokens > 200000 maximum' });
    const auth = classifyUpstreamError(401, JSON.stringify({ error: { message: 'Incorrect API key provided: sk-proj-abc123xyz. See https://platform.openai.com' } }), h());
    expect(auth.error.message).not.toContain('sk-');
    expect(auth.error.message).not.toContain('openai.com');
    expect(classifyUpstreamError(400, '<html>oops</html>', h()).error.message).toBe('The upstream rejected the request (HTTP 400).');
  });

  test('scrub removes urls, keys and bearer tokens', () => {
    expect(scrub('see https://x.internal/a?k=1 with sk-live_abcdef123 and Bearer abc.def')).toBe('see [url] with [redacted] and Bearer [redacted]');
  });

  test('transport errors are retryable; a timeout is a 504', () => {
    expect(classifyTransportError(new Error('ECONNREFUSED'))).toMatchObject({ retryable: true, kind: 'unreachable', error: { status: 502 } });
    expect(classifyTransportError(new Error('aborted'), true)).toMatchObject({ retryable: true, kind: 'timeout', error: { status: 504 } });
  });
});

describe('channel scrubber', () => {
  const key = 'Zq9xK2mP7vLw4Rt8Yb3N';
  const s = scrubberFor({ apiKey: key, extraHeaders: { 'x-org-token': 'orgsecretvalue77', 'x-version': '2024-01-01' } });

  test('the channel key is removed in any format, whole or any fragment of 8+ characters', () => {
    expect(s.scrub(`bad key ${key} given`)).toBe('bad key [redacted] given');
    expect(s.scrub(`key ending ...${key.slice(-10)}`)).toBe('key ending ...[redacted]');
    expect(s.scrub(`starts ${key.slice(0, 9)}.`)).toBe('starts [redacted].');
    expect(s.scrub(`inner ${key.slice(5, 13)} x`)).toBe('inner [redacted] x');
    expect(s.scrub('short fragment Zq9xK2m stays')).toBe('short fragment Zq9xK2m stays');
  });

  test('credential-looking extra header values are secrets too; plain ones are not', () => {
    expect(s.scrub('token orgsecretvalue77 and version 2024-01-01')).toBe('token [redacted] and version 2024-01-01');
    expect(isCredentialHeader('x-goog-api-key', 'abc')).toBe(true);
    expect(isCredentialHeader('x-custom', 'AbCdEfGh1234567890XyZ')).toBe(true);
    expect(isCredentialHeader('anthropic-beta', 'prompt-caching-2024-07-31')).toBe(false);
  });

  test('classifyUpstreamError passes a 400 message through the channel scrubber, capped', () => {
    const c = classifyUpstreamError(400, JSON.stringify({ error: { message: `invalid x-api-key: ${key.slice(2)}${'!'.repeat(5000)}` } }), new Headers(), s);
    expect(c.error.message).not.toContain(key.slice(2, 10));
    expect(c.error.message.length).toBeLessThan(460);
  });

  test('3xx is a retryable upstream error (redirects are not followed)', () => {
    const c = classifyUpstreamError(302, '', new Headers({ location: 'https://elsewhere.example/' }));
    expect(c).toMatchObject({ retryable: true, kind: 'server' });
    expect(c.error.status).toBe(502);
  });
});

describe('an upstream model\'s output cap', () => {
  const body = (message: string) => JSON.stringify({ error: { message, type: 'invalid_request_error', param: 'max_tokens', code: 'invalid_value' } });
  test("OpenAI's 400 is worded as Anthropic's, may be served by another channel, and is no fault of the channel", () => {
    const c = classifyUpstreamError(400, body('max_tokens is too large: 64000. This model supports at most 16384 completion tokens, whereas you provided 64000.'), new Headers());
    expect(c).toMatchObject({ kind: 'model_limit', retryable: true });
    expect(c.error).toMatchObject({ status: 400, code: 'max_tokens_too_large', param: 'max_tokens', type: 'invalid_request_error',
      message: 'max_tokens: 64000 > 16384, which is the maximum allowed number of output tokens for this model' });
  });
  test("Anthropic's own wording (native channels) is the same refusal, without the upstream's model name", () => {
    const c = classifyUpstreamError(400, body('max_tokens: 64000 > 32000, which is the maximum allowed number of output tokens for claude-x'), new Headers());
    expect(c).toMatchObject({ kind: 'model_limit', retryable: true });
    expect(c.error.message).toBe('max_tokens: 64000 > 32000, which is the maximum allowed number of output tokens for this model');
    const hinted = classifyUpstreamError(400, body('max_tokens: 64000 > 32000, which is the maximum allowed number of output tokens for claude-x'), new Headers({ 'x-should-retry': 'false' }));
    expect(hinted).toMatchObject({ kind: 'model_limit', retryable: true });
    const quoted = classifyUpstreamError(400, body("Invalid value: 'max_tokens: 5 > 1, which is the maximum allowed number of output tokens for x'"), new Headers());
    expect(quoted.error.code).toBe('upstream_invalid_request');
  });
  test('the same words quoted later in another error (a client\'s own text echoed back) are the client\'s 400', () => {
    const c = classifyUpstreamError(400, body("Invalid value for 'x': 'max_tokens is too large: 5. This model supports at most 1 completion tokens'"), new Headers());
    expect(c).toMatchObject({ kind: 'invalid_request', retryable: false });
    expect(c.error.code).toBe('upstream_invalid_request');
  });
});
