/**
 * Attack from the upstream side, through the client's error message: an upstream's 400 is relayed with its message
 * (scrubbed), and the scrubber removed the channel's keys and anything written as a URL, but not the channel's address
 * written bare. Proxies and self-hosted servers name where they run in their errors ("… on 10.0.4.17:8000",
 * "host llm-pool.corp.internal"): every client learned the internal host (and path, an account id in some gateways'
 * URLs) of the operator's upstream. Now the channel's base_url host, host:port and path are removed from every
 * upstream text like its keys. Real gateway, upstream doubles over HTTP; native and translated (a stream never relays upstream text).
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let a: Scripted;
let o: Scripted;
let key: string;

beforeAll(async () => {
  gw = await startGateway({ RELAY_HEALTH_FAILURES: '1000' });
  a = upstream('anthropic');
  o = upstream('openai');
  await addChannel(gw, { type: 'anthropic', url: `${a.url}/acct-7f3e91/pool-east`, models: ['host-native'] });
  await addChannel(gw, { type: 'openai', url: o.url, models: ['host-openai'] });
  await setPrice(gw, 'host-native');
  await setPrice(gw, 'host-openai');
  key = (await keyedUser(gw, 100_000_000)).key;
});
afterAll(async () => {
  await a.stop();
  await o.stop();
  await gw.stop();
});

const hostOf = (url: string) => new URL(url).host;

test('native: a 400 naming the channel host, host:port and path bare says neither to the client', async () => {
  const host = hostOf(a.url);
  const hostname = new URL(a.url).hostname;
  a.queue.push({ error: { status: 400, type: 'invalid_request_error', message: `tools.0: unsupported by backend ${host}/acct-7f3e91/pool-east (node ${hostname}, account acct-7f3e91)` } });
  const r = await send(gw, key, msg('host-native'));
  expect(r.status).toBe(400);
  const text = r.body.error.message as string;
  expect(text).toContain('tools.0: unsupported by backend');
  expect(text).not.toContain(hostname);
  expect(text).not.toContain('acct-7f3e91');
  expect(text).not.toContain('pool-east');
});

test('translated: the same for an OpenAI-compatible upstream\'s 400', async () => {
  const hostname = new URL(o.url).hostname;
  o.queue.push({ error: { status: 400, message: `model host-openai is not loaded on ${hostOf(o.url)} (worker ${hostname.toUpperCase()})` } });
  const r = await send(gw, key, msg('host-openai'));
  expect(r.status).toBe(400);
  const text = r.body.error.message as string;
  expect(text).toContain('is not loaded on');
  expect(text.toLowerCase()).not.toContain(hostname.toLowerCase());
});
