/**
 * Set-up shared by the cluster tests: a channel on an upstream double, a price, a funded user with a key
 * (all through node 0's management API), and the checks every money test ends with.
 */
import { expect, test } from 'bun:test';
import Redis from 'ioredis';
import { within, type Cluster } from '../helpers/cluster';
import { REDIS_TEST_URL } from '../helpers/redis';

export const HEADERS = { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' };

/** Output-only price: a request with max_tokens 10 reserves exactly what 10 reported output tokens cost. */
export const OUTPUT_PRICE = 100_000_000; // per million tokens: 100 units per token
export const REQUEST_COST = 10 * OUTPUT_PRICE / 1_000_000; // 1000

export async function addChannel(c: Cluster, upstreamUrl: string, models: string[], name = 'ch'): Promise<number> {
  const r = await c.api(0, 'POST', '/api/channel/', { name, type: 'anthropic', base_url: upstreamUrl, key: 'up-key-1', models, timeout_ms: 10_000 });
  if (r.status !== 200) throw new Error(`channel: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.data.id;
}

export async function setPrice(c: Cluster, model: string, output = OUTPUT_PRICE, node = 0) {
  const r = await c.api(node, 'PUT', '/api/pricing/', { model, input: 0, output, cache_read: 0, cache_write: 0 });
  if (r.status !== 200) throw new Error(`price: ${r.status} ${JSON.stringify(r.body)}`);
}

/**
 * Waits until every node knows `key` (a write on one node reaches the others through the change feed a
 * few ms after it was answered). The probe has no version header: a known key gets 400, an unknown one
 * 401, and neither counts toward any limit or costs anything.
 */
export async function knownEverywhere(c: Cluster, key: string): Promise<void> {
  await Promise.all(c.nodes.map((n) => within(`key known on node ${n.index}`, 5_000, async () => {
    const res = await fetch(`${n.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key }, body: '{}' });
    await res.text();
    return res.status === 400;
  })));
}

/** A user with `quota` (opening ledger credit) and one key (extra key fields, e.g. remain_quota), known on every node. */
export async function fundedUser(c: Cluster, quota: number, key: Record<string, unknown> = {}) {
  const username = `u${crypto.randomUUID().slice(0, 8)}`;
  const u = await c.api(0, 'POST', '/api/user/', { username, password: 'cluster-user-pw-1', quota });
  if (u.status !== 200) throw new Error(`user: ${u.status} ${JSON.stringify(u.body)}`);
  const k = await c.api(0, 'POST', '/api/token/', { name: 'k', user_id: u.body.data.id, ...key });
  if (k.status !== 200) throw new Error(`key: ${k.status} ${JSON.stringify(k.body)}`);
  await knownEverywhere(c, k.body.data.key);
  return { userId: u.body.data.id as number, key: k.body.data.key as string, keyId: k.body.data.id as number };
}

export interface Sent { status: number; text: string; requestId: string | null; headers: Headers }

/** POST /v1/messages on one node; the whole body is read. */
export async function send(url: string, key: string, body: Record<string, unknown>): Promise<Sent> {
  const res = await fetch(`${url}/v1/messages`, { method: 'POST', headers: { ...HEADERS, 'x-api-key': key }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, text, requestId: res.headers.get('request-id'), headers: res.headers };
}

export const msg = (model: string, extra: Record<string, unknown> = {}) => ({ model, max_tokens: 10, messages: [{ role: 'user', content: 'hi' }], ...extra });

/** Statuses counted: `{200: n, 402: m, …}`. */
export const tally = (rs: Array<{ status: number }>) => rs.reduce<Record<number, number>>((t, r) => ({ ...t, [r.status]: (t[r.status] ?? 0) + 1 }), {});

/** A node-independent read of a user's money: stored balance, ledger sum, charges and usage. */
export async function money(c: Cluster, userId: number) {
  const [u] = await c.sql`select quota from users where id = ${userId}`;
  const [l] = await c.sql`select coalesce(sum(amount), 0)::bigint as s from ledger where user_id = ${userId}`;
  const charges = await c.sql`select ref, amount from ledger where user_id = ${userId} and kind = 'charge'`;
  const usage = await c.sql`select request_id, cost, status from usage_logs where user_id = ${userId}`;
  return { balance: Number(u!.quota), ledgerSum: Number(l!.s), charges, usage };
}

/** The ledger is the truth: balance = Σ ledger, one usage row and at most one charge per request id. */
export async function expectConsistent(c: Cluster, userId: number) {
  const m = await money(c, userId);
  expect(m.balance).toBe(m.ledgerSum);
  const ids = m.usage.map((r) => r.request_id);
  expect(new Set(ids).size).toBe(ids.length);
  const refs = m.charges.map((r) => r.ref);
  expect(new Set(refs).size).toBe(refs.length);
  return m;
}

/**
 * Holds in flight in Redis under the cluster's prefix: Σ `held` of every user/key mirror and the number
 * of hold entries. Zero once everything settled (also zero while holds are not kept in Redis at all).
 */
export async function redisHolds(c: Cluster): Promise<{ held: number; entries: number }> {
  const r = new Redis(REDIS_TEST_URL, { maxRetriesPerRequest: 2 });
  try {
    let held = 0;
    let entries = 0;
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${c.prefix}{u:*`, 'COUNT', 1000);
      cursor = next;
      for (const k of keys) {
        if ((await r.type(k)) !== 'hash') continue;
        const h = await r.hget(k, 'held');
        if (h !== null) held += Number(h);
        else if (/:holds?$/.test(k)) entries += await r.hlen(k);
      }
    } while (cursor !== '0');
    return { held, entries };
  } finally {
    r.disconnect();
  }
}

