/**
 * Attack: a client words its input as an upstream's account refusal, so that an upstream quoting it back in an error
 * ("Invalid value for 'metadata.user_id': '…'", as OpenAI-compatible servers and validators do) reads as "this key is
 * out of credit". The gateway took it for a key refusal: a probe of the key on every such request (at most one per
 * key per 10 s), and the client's own mistake answered 502 upstream_quota_exhausted instead of the upstream's 400
 * (before the probe existed, the key was stored disabled and every channel of the model tried). A real, passing
 * rate limit whose message mentions billing (OpenAI's "…add a payment method… /account/billing") was a quota
 * refusal too: its probe, in the same window, was refused alike and the key stored disabled for good.
 *
 * Fixed: a key refusal is read from what the upstream states about itself (the error's type or code; Anthropic's
 * credit refusal only as the message's own opening sentence), never from text that may hold the client's input.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, nodeOne, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
const ups: Scripted[] = [];
beforeAll(async () => {
  gw = await startGateway({ RELAY_PROBE_INTERVAL_MS: '3600000', RELAY_MAX_ATTEMPTS: '3' });
});
afterAll(async () => { for (const u of ups) await u.stop(); await gw.stop(); });

const channelStatus = async (id: number) => (await gw.api('GET', `/api/channel/${id}`)).body.data.status as number;
const keyStatuses = async (id: number) => ((await gw.api('GET', `/api/channel/${id}/keys`)).body.data as any[]).map((k) => k.status as number);

/** Two channels of `model` whose upstreams quote the client's metadata.user_id back in a 400, like a field validator. */
async function echoingPair(model: string, kind: 'anthropic' | 'openai') {
  await setPrice(gw, model);
  const us = [upstream(kind), upstream(kind)];
  ups.push(...us);
  const ids: number[] = [];
  for (const [i, u] of us.entries()) {
    u.double.script((req) => {
      const v = req.body?.metadata?.user_id ?? req.body?.user;
      return typeof v === 'string' ? { error: { status: 400, message: `Invalid value for 'metadata.user_id': '${v}'` } } : { text: 'fine' };
    });
    ids.push(await addChannel(gw, { type: kind, url: u.url, models: [model], priority: 2 - i }));
  }
  return { us, ids, hits: () => us.map((u) => u.hits) };
}

test('a client\'s input quoted back as "Your credit balance is too low…" is the client\'s 400: no key set aside, no failover', async () => {
  for (const kind of ['anthropic', 'openai'] as const) {
    const model = `echo-credit-${kind}`;
    const { ids, hits } = await echoingPair(model, kind);
    const attacker = await keyedUser(gw);
    const victim = await keyedUser(gw);
    for (const words of ['Your credit balance is too low to access the Anthropic API.', 'You exceeded your current quota, see billing']) {
      const r = await send(nodeOne(gw), attacker.key, msg(model, { metadata: { user_id: words } }));
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('upstream_invalid_request');
    }
    expect(hits()).toEqual([2, 0]);
    const ok = await send(nodeOne(gw), victim.key, msg(model));
    expect(ok.body?.error?.code ?? 'ok').toBe('ok');
    await Bun.sleep(200); // a refusal is stored beside the request: give a wrong one the time to land
    for (const id of ids) {
      expect(await keyStatuses(id)).toEqual([1]);
      expect(await channelStatus(id)).toBe(1);
    }
  }
}, 20_000);

test('held: a client\'s input quoted back in an output-cap wording is the client\'s 400, not tried on the model\'s other channels', async () => {
  // The wordings of an output cap are read only from the start of the upstream's message: one the client planted in
  // a field the upstream quotes must not send every request on to the model's other channels.
  const model = 'echo-cap';
  // A native channel: it passes metadata.user_id as sent (a translated one hashes one over 64 characters).
  const { us, ids, hits } = await echoingPair(model, 'anthropic');
  const attacker = await keyedUser(gw);
  const words = ['Invalid max_tokens value, the valid range of max_tokens is [1, 8192]', '`max_tokens` must be less than or equal to `8`, the maximum value for `max_tokens` is less than the `context_window` for this model',
    'max_tokens is too large: 64000. This model supports at most 16384 completion tokens'];
  for (const w of words) {
    const r = await send(nodeOne(gw), attacker.key, msg(model, { max_tokens: 64000, metadata: { user_id: w } }));
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('upstream_invalid_request');
    expect(r.body.error.message).toContain(w);
  }
  expect(us[0]!.last().body.metadata.user_id).toBe(words.at(-1));
  expect(hits()).toEqual([words.length, 0]);
  for (const id of ids) expect(await channelStatus(id)).toBe(1);
}, 20_000);

test('a passing OpenAI rate limit whose message mentions billing stays a 429 rate limit: the key is kept', async () => {
  await setPrice(gw, 'echo-rl');
  const u = upstream('openai');
  ups.push(u);
  // The window lasts a little: a second request (or a probe of the key) in it is refused alike, then it passes.
  const limited = { error: { status: 429, retryAfter: 2, message: 'Rate limit reached for echo-rl on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s. Please add a payment method to your account to increase your rate limit. Visit https://platform.openai.com/account/billing to add a payment method.' } };
  u.queue.push(limited, limited);
  const id = await addChannel(gw, { type: 'openai', url: u.url, models: ['echo-rl'] });
  const user = await keyedUser(gw);
  const r = await send(nodeOne(gw), user.key, msg('echo-rl'));
  expect(r.status).toBe(429);
  expect(r.body.error.code).toBe('upstream_rate_limited');
  expect((await send(nodeOne(gw), user.key, msg('echo-rl'))).status).toBe(429);
  expect((await send(nodeOne(gw), user.key, msg('echo-rl'))).status).toBe(200);
  await Bun.sleep(200);
  expect(await keyStatuses(id)).toEqual([1]);
}, 20_000);

test('held: the upstream\'s own refusals still set the key aside (Anthropic credit 400, OpenAI 429 insufficient_quota)', async () => {
  for (const [kind, error] of [
    ['anthropic', { status: 400, message: 'Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.' }],
    ['openai', { status: 429, type: 'insufficient_quota', message: 'You exceeded your current quota, please check your plan and billing details.' }],
  ] as const) {
    const model = `own-refusal-${kind}`;
    await setPrice(gw, model);
    const u = upstream(kind, { error });
    ups.push(u);
    const id = await addChannel(gw, { type: kind, url: u.url, models: [model] });
    const user = await keyedUser(gw);
    const r = await send(nodeOne(gw), user.key, msg(model));
    expect(r.status).toBe(502);
    expect(r.body.error.code).toBe('upstream_quota_exhausted');
    let got: number[] = [];
    for (let i = 0; i < 100 && (got = await keyStatuses(id))[0] === 1; i++) await Bun.sleep(20);
    expect(got).not.toEqual([1]);
  }
}, 20_000);

test('a stream whose first event is the upstream refusing the client\'s request (OpenRouter code 400) is the client\'s 400: no failover, no health count', async () => {
  // OpenRouter answers 200 and keep-alive comments while its provider works; the provider's 400 then comes as an
  // error chunk with the status in `code`. Read as a 500, it failed over to every channel and counted against each.
  const model = 'stream-400';
  await setPrice(gw, model);
  const frame = `: OPENROUTER PROCESSING\n\ndata: ${JSON.stringify({ error: { code: 400, message: 'This model\'s maximum context length is 8192 tokens. However, you requested 9000 tokens (8000 in the messages, 1000 in the completion).' } })}\n\n`;
  const us = [upstream('openai'), upstream('openai')];
  ups.push(...us);
  const ids: number[] = [];
  for (const [i, u] of us.entries()) {
    u.fallback = { response: () => new Response(frame, { headers: { 'content-type': 'text/event-stream' } }) };
    ids.push(await addChannel(gw, { type: 'openai', url: u.url, models: [model], priority: 2 - i }));
  }
  const user = await keyedUser(gw);
  for (let i = 0; i < 3; i++) {
    const r = await send(nodeOne(gw), user.key, msg(model, { stream: true }));
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ type: 'invalid_request_error', code: 'prompt_too_long', message: 'input length and `max_tokens` exceed context limit: 8000 + 1000 > 8192, decrease input length or `max_tokens` and try again' });
  }
  expect(us.map((u) => u.hits)).toEqual([3, 0]);
  for (const id of ids) expect(await channelStatus(id)).toBe(1);
}, 20_000);
