/** Shared set-up of the relay end-to-end tests: channels, prices, users with keys and balance. */
import { CLUSTER_NODES, makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { startAnthropicUpstream } from '../doubles/anthropic-upstream';
import { startOpenAIUpstream } from '../doubles/openai-upstream';
import type { RecordedRequest, UpstreamDouble, UpstreamPlan } from '../doubles/sse';

/** An upstream double answered from a queue of plans (then `fallback`), as the relay tests script it. */
export interface Scripted {
  url: string;
  double: UpstreamDouble;
  queue: UpstreamPlan[];
  fallback: UpstreamPlan;
  readonly hits: number;
  last(): RecordedRequest;
  stop(): Promise<void>;
}

export function upstream(kind: 'anthropic' | 'openai', fallback: UpstreamPlan = { text: 'Hello there' }): Scripted {
  const double = kind === 'anthropic' ? startAnthropicUpstream({ maxRecorded: 100 }) : startOpenAIUpstream({ maxRecorded: 100 });
  const s: Scripted = {
    url: double.url, double, queue: [], fallback,
    get hits() { return double.count; },
    last: () => double.requests.at(-1)!,
    stop: () => double.stop(),
  };
  double.script(() => s.queue.shift() ?? s.fallback);
  return s;
}

export const V = { 'vendor-version': '2023-06-01' };

export async function addChannel(gw: TestGateway, o: { type: 'anthropic' | 'openai'; url: string; models: string[]; priority?: number; weight?: number; mapping?: Record<string, string>; group?: string; name?: string }): Promise<number> {
  const r = await gw.api('POST', '/api/channel/', {
    name: o.name ?? `ch-${o.type}`, type: o.type, base_url: o.url, key: 'upstream-key', models: o.models,
    model_mapping: o.mapping ?? {}, priority: o.priority ?? 0, weight: o.weight ?? 1, timeout_ms: 5000, ...(o.group ? { group: o.group } : {}),
  });
  if (r.status !== 200) throw new Error(`channel create: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.data.id;
}

export async function setPrice(gw: TestGateway, model: string, p: Partial<Record<'input' | 'output' | 'cache_read' | 'cache_write', number>> = {}) {
  const r = await gw.api('PUT', '/api/pricing/', { model, input: 1_000_000, output: 2_000_000, cache_read: 0, cache_write: 0, ...p });
  if (r.status !== 200) throw new Error(`price: ${r.status} ${JSON.stringify(r.body)}`);
}

/** A user with `balance` quota units and a relay key. */
/** A gateway with one OpenAI-compatible channel (model `oai-m`) and one Anthropic channel (`native-m`), both priced. */
export async function bothChannelTypes(price: Parameters<typeof setPrice>[2] = {}) {
  const gw = await startGateway();
  const oai = upstream('openai');
  const native = upstream('anthropic');
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['oai-m'] });
  await addChannel(gw, { type: 'anthropic', url: native.url, models: ['native-m'] });
  for (const model of ['oai-m', 'native-m']) await setPrice(gw, model, price);
  return { gw, oai, native, stop: async () => { await gw.stop(); await oai.stop(); await native.stop(); } };
}

export async function keyedUser(gw: TestGateway, balance = 1_000_000, key: Record<string, unknown> = {}) {
  const u = await makeUser(gw);
  if (balance) await gw.services.ledger.apply({ userId: u.id, kind: 'topup', amount: balance, ref: `seed-${u.id}`, at: 1 });
  const r = await gw.api('POST', '/api/token/', { name: 'k', ...key }, u.token);
  if (r.status !== 200) throw new Error(`token: ${r.status} ${JSON.stringify(r.body)}`);
  return { ...u, key: r.body.data.key as string, keyId: r.body.data.id as number };
}

/**
 * What the user can still reserve. Behind the cluster harness every node admits through the shared store, so
 * that is asked (balance − every node's holds); in one process, this process's view (balance − pending − held).
 */
export async function availableOf(gw: TestGateway, userId: number): Promise<number> {
  if (CLUSTER_NODES > 1) return (await gw.services.backend.holds!.store.available({ userId })).user ?? 0;
  return gw.services.relay.quota.available(userId);
}

/** The user's balance: this process's cache in one process; the ledger's committed balance behind the cluster harness (node 1's cache does not hear other nodes' charges). */
export async function balanceOf(gw: TestGateway, userId: number): Promise<number> {
  if (CLUSTER_NODES > 1) return (await gw.services.users.byId(userId))!.quota;
  return gw.services.relay.quota.balance(userId);
}

/** POST /v1/messages with the key; returns status, parsed body (or raw text for SSE) and headers. */
/**
 * The gateway as node 1 alone serves it (the same gateway without a cluster): for tests of what is per node by
 * design (README: Running a cluster), so that behind the cluster proxy they still address one node.
 */
export const nodeOne = (gw: TestGateway): TestGateway => ({ ...gw, url: gw.nodeUrl, api: gw.nodeApi });

export async function send(gw: TestGateway, key: string | null, body: unknown, headers: Record<string, string> = V) {
  const h: Record<string, string> = { 'content-type': 'application/json', ...headers };
  if (key) h['x-api-key'] = key;
  const res = await fetch(`${gw.url}/v1/messages`, { method: 'POST', headers: h, body: typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await res.text();
  let parsed: any = text;
  try { parsed = JSON.parse(text); } catch { /* SSE */ }
  return { status: res.status, body: parsed, text, headers: res.headers };
}

export const msg = (model: string, extra: Record<string, unknown> = {}) => ({ model, max_tokens: 100, messages: [{ role: 'user', content: 'Hi' }], ...extra });

/** The `event:` names of an SSE body, in order (pings dropped). */
export const eventNames = (text: string) => [...text.matchAll(/^event: (.+)$/gm)].map((m) => m[1]).filter((e) => e !== 'ping');
