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

  test("another key sharing the channel key's prefix is removed whole, not left as its tail", () => {
    const proj = scrubberFor({ apiKey: 'sk-proj-Zq9xK2mP7vLw4Rt8Yb3N' });
    // The prefix is a fragment of the channel key: removed first, it left the other key's tail, which no pattern knew.
    expect(proj.scrub('Incorrect API key provided: sk-proj-OTHERkey1234567890abc.')).toBe('Incorrect API key provided: [redacted].');
    expect(proj.scrub('keys sk-proj-Zq9xK2mP7vLw4Rt8Yb3N and sk-proj-OTHERkey1234567890abc')).toBe('keys [redacted] and [redacted]');
    // A channel key with a character the key patterns stop at is still removed whole (patterns run after it).
    const dotted = scrubberFor({ apiKey: 'key-abcdefgh12345678.k9Zq7x' });
    expect(dotted.scrub('bad key key-abcdefgh12345678.k9Zq7x given')).toBe('bad key [redacted] given');
  });

  test('credential-looking extra header values are secrets too; plain ones are not', () => {
    expect(s.scrub('token orgsecretvalue77 and version 2024-01-01')).toBe('token [redacted] and version 2024-01-01');
    expect(isCredentialHeader('x-goog-api-key', 'abc')).toBe(true);
    expect(isCredentialHeader('x-custom', 'AbCdEfGh1234567890XyZ')).toBe(true);
    expect(isCredentialHeader('anthropic-beta', 'prompt-caching-2024-07-31')).toBe(false);
  });

  test("the channel's address written bare is removed: host:port, host in any case, long path segments, whole words only", () => {
    const a = scrubberFor({ apiKey: key, baseUrl: 'https://LLM-Pool.corp.internal:8443/acct/9f3e7a21c0/openai' });
    expect(a.scrub('model x not loaded on llm-pool.corp.internal:8443 (worker LLM-POOL.CORP.INTERNAL)')).toBe('model x not loaded on [redacted] (worker [redacted])');
    expect(a.scrub('account 9f3e7a21c0 has no access to /acct/9f3e7a21c0/openai')).toBe('account [redacted] has no access to /acct/[redacted]');
    // Another host that merely contains the channel's: left as it is (and short segments such as `openai` are words).
    expect(a.scrub('see my-llm-pool.corp.internal-2 and openai')).toBe('see my-llm-pool.corp.internal-2 and openai');
    const ip = scrubberFor({ apiKey: key, baseUrl: 'http://10.0.4.17:8000' });
    expect(ip.scrub('connect 10.0.4.17:8000 failed; 10.0.4.170 is up; 10.0.4.17 is down')).toBe('connect [redacted] failed; 10.0.4.170 is up; [redacted] is down');
    const v6 = scrubberFor({ apiKey: key, baseUrl: 'http://[fd00::17]:8000' });
    expect(v6.scrub('no route to fd00::17 or [fd00::17]:8000')).toBe('no route to [redacted] or [redacted]');
  });

  test('path segments that are plain lower-case words (a provider\'s vocabulary) stay; ids and names go', () => {
    const ds = scrubberFor({ apiKey: key, baseUrl: 'https://api.deepseek.com/anthropic' });
    expect(ds.scrub('The Anthropic API format is not supported for this model')).toBe('The Anthropic API format is not supported for this model');
    const az = scrubberFor({ apiKey: key, baseUrl: 'https://res.example/openai/deployments/gpt4o-prod-eastus' });
    expect(az.scrub('deployments_list: gpt4o-prod-eastus not found in deployments')).toBe('deployments_list: [redacted] not found in deployments');
    const fw = scrubberFor({ apiKey: key, baseUrl: 'https://fw.example/inference/v1/Tenant/TeamBlue' });
    expect(fw.scrub('inference failed for TeamBlue (tenant teamblue)')).toBe('inference failed for [redacted] (tenant [redacted])');
  });

  test("a one-label host under 8 characters (a compose service: api, model, litellm) is removed only with its port", () => {
    // Removed bare in any case, `http://api:8000` made "Invalid API key" read "Invalid [redacted] key", and `model` every "model".
    const api = scrubberFor({ apiKey: key, baseUrl: 'http://api:8000/v1' });
    expect(api.scrub('Invalid API key for api.example; model not found')).toBe('Invalid API key for api.example; model not found');
    expect(api.scrub('connect api:8000 refused')).toBe('connect [redacted] refused');
    const model = scrubberFor({ apiKey: key, baseUrl: 'http://model:8000' });
    expect(model.scrub("This model's maximum context length is 8192 tokens")).toBe("This model's maximum context length is 8192 tokens");
    // A named host of 8 or more characters, a dotted one and an address are removed bare still.
    expect(scrubberFor({ apiKey: key, baseUrl: 'http://vllm-qwen-72b:8000' }).scrub('not loaded on vllm-qwen-72b')).toBe('not loaded on [redacted]');
    expect(scrubberFor({ apiKey: key, baseUrl: 'http://llm.svc:8000' }).scrub('not loaded on llm.svc')).toBe('not loaded on [redacted]');
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

describe("other OpenAI-compatible servers' wordings of an output cap", () => {
  const body = (message: string, extra: object = {}) => JSON.stringify({ error: { message, type: 'invalid_request_error', param: null, code: null, ...extra } });
  const capOf = (message: string, sent?: number) => classifyUpstreamError(400, body(message), new Headers(), undefined, sent);
  const answer = (asked: number, cap: number) => `max_tokens: ${asked} > ${cap}, which is the maximum allowed number of output tokens for this model`;
  // Each wording as the provider sends it, the request's max_tokens as the gateway sent it (when the wording lacks it).
  const cases: Array<[string, string, number | undefined, string]> = [
    ['DeepSeek', 'Invalid max_tokens value, the valid range of max_tokens is [1, 8192]', 32000, answer(32000, 8192)],
    ['Groq', '`max_tokens` must be less than or equal to `16384`, the maximum value for `max_tokens` is less than the `context_window` for this model', 64000, answer(64000, 16384)],
    ['Groq (max_completion_tokens, unquoted)', 'max_completion_tokens must be less than or equal to 40960, the maximum value for max_completion_tokens is less than the context_window for this model', 64000, answer(64000, 40960)],
    ['Groq (older, with the model)', 'max_tokens for `llama-3.1-8b-instant` must be less than or equal to 8000', 32000, answer(32000, 8000)],
    ['Groq (older, preview model)', 'max_tokens for preview model `llama-3.1-8b-instant` must be less than or equal to 8000', 32000, answer(32000, 8000)],
    ['Volcengine Ark', 'The parameter `max_completion_tokens` specified in the request are not valid: integer above maximum value, expected a value <= 12288, but got 32000 instead. Request id: 0217752964393142fa50af54af66c5cfb922304bfd59ea286af93', undefined, answer(32000, 12288)],
    ['Volcengine Ark (unquoted, "is")', 'The parameter max_tokens specified in the request is not valid: integer above maximum value, expected a value <= 32768, but got 64000 instead. Request id: 0217724325966514087c9e55f8b322b82cd17f72450d06e16ef7b', undefined, answer(64000, 32768)],
    ['Ollama Cloud', "max_tokens (384000) exceeds model's maximum output tokens (65536) for model deepseek-v4-flash:0731", undefined, answer(384000, 65536)],
    ['Gemini (Vertex AI)', 'Unable to submit request because it has a maxOutputTokens value of 655360 but the supported range is from 1 (inclusive) to 8193 (exclusive). Update the value and try again.', undefined, answer(655360, 8192)],
    ['DeepInfra', 'max_tokens=131072 cannot be greater than max_model_len=max_total_tokens=28672. Please request fewer output tokens. (parameter=max_tokens, value=131072)', undefined, answer(131072, 28672)],
  ];
  for (const [who, message, sent, expected] of cases) {
    test(`${who}: a model_limit, in Anthropic's words with both numbers`, () => {
      const c = capOf(message, sent);
      expect(c).toMatchObject({ kind: 'model_limit', retryable: true });
      expect(c.error).toMatchObject({ status: 400, code: 'max_tokens_too_large', param: 'max_tokens', message: expected });
      expect(c.error.message).not.toContain('llama');
      expect(c.error.message).not.toContain('deepseek-v4');
    });
  }
  test("DeepSeek's own body (its code is invalid_request_error) is read the same way", () => {
    const c = classifyUpstreamError(400, body('Invalid max_tokens value, the valid range of max_tokens is [1, 8192]', { code: 'invalid_request_error' }), new Headers(), undefined, 64000);
    expect(c.error.message).toBe(answer(64000, 8192));
  });
  test('a wording with the cap alone, where the request\'s max_tokens is not known, says the cap', () => {
    const c = capOf('Invalid max_tokens value, the valid range of max_tokens is [1, 8192]');
    expect(c).toMatchObject({ kind: 'model_limit', retryable: true });
    expect(c.error.message).toBe('max_tokens is above 8192, which is the maximum allowed number of output tokens for this model');
  });
  test('a range refusal of a max_tokens within the cap is no output cap: the client\'s 400', () => {
    for (const sent of [8192, 0]) expect(capOf('Invalid max_tokens value, the valid range of max_tokens is [1, 8192]', sent).error.code).toBe('upstream_invalid_request');
    expect(capOf('Unable to submit request because it has a maxOutputTokens value of 0 but the supported range is from 1 (inclusive) to 8193 (exclusive).').error.code).toBe('upstream_invalid_request');
  });
  test('the same words later in a message (an upstream echoing the client\'s model or tool name) are the client\'s 400', () => {
    const quoted = [
      "Invalid value for 'model': 'Invalid max_tokens value, the valid range of max_tokens is [1, 8192]'",
      'Tool name `max_tokens must be less than or equal to 8, the maximum value for max_tokens is less than the context_window for this model` is invalid',
      "Model 'x' not found. max_tokens (5) exceeds model's maximum output tokens (1)",
      "Invalid value: 'The parameter max_tokens specified in the request is not valid: integer above maximum value, expected a value <= 1, but got 5 instead.'",
      'Unknown model: max_tokens for `x` must be less than or equal to 1',
      "tools[0].name: 'Unable to submit request because it has a maxOutputTokens value of 5 but the supported range is from 1 (inclusive) to 2 (exclusive)'",
    ];
    for (const message of quoted) {
      const c = capOf(message, 64000);
      expect([message, c.kind, c.error.code]).toEqual([message, 'invalid_request', 'upstream_invalid_request']);
    }
  });
  test('Groq\'s older wording must end at the number: text after it is not Groq\'s', () => {
    expect(capOf('max_tokens for `x` must be less than or equal to 8000, tool `y` set max_tokens', 64000).error.code).toBe('upstream_invalid_request');
  });
  test('a context-window error stays prompt_too_long, not an output cap', () => {
    const c = capOf("This model's maximum context length is 128000 tokens. However, you requested 140000 tokens (8000 in the messages, 132000 in the completion). Please reduce the length of the messages or completion.", 132000);
    expect(c).toMatchObject({ kind: 'invalid_request', retryable: false });
    expect(c.error.code).toBe('prompt_too_long');
    const vllm = capOf("'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778). None", 8000);
    expect(vllm.error.code).toBe('prompt_too_long');
  });
});
