/**
 * One happy path per command group against a real gateway, through the CLI subprocess:
 * what the CLI prints must match what the API holds afterwards.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { cliSandbox, type CliSandbox } from './run-cli';

let gw: TestGateway;
let sb: CliSandbox;
let env: Record<string, string>;
let stripe: ReturnType<typeof Bun.serve>;
beforeAll(async () => {
  // A stand-in for providerA's checkout API, so `topup create` gets a real checkout answer.
  stripe = Bun.serve({
    port: 0, hostname: '127.0.0.1',
    fetch: (req) => new URL(req.url).pathname === '/v1/checkout/sessions'
      ? Response.json({ id: 'cs_test_cli', url: 'https://checkout.example/cs_test_cli' })
      : new Response('not found', { status: 404 }),
  });
  gw = await startGateway({
    PROVIDER_A_API_BASE: `http://127.0.0.1:${stripe.port}`, PROVIDER_A_SECRET_KEY: 'sk_test_x', PROVIDER_A_WEBHOOK_SECRET: 'whsec_x',
  });
  sb = cliSandbox();
  // Credentials from the environment this time (login is covered in session.test.ts).
  env = { GATEWAY_URL: gw.url, GATEWAY_TOKEN: gw.rootToken };
});
afterAll(async () => { await gw.stop(); stripe.stop(true); sb.cleanup(); });

const gwc = (args: string[], stdin?: string) => sb.run(args, { env, stdin });

describe('gw channel', () => {
  test('create (key from stdin), list with filters, update, disable-tag, batch-delete', async () => {
    const created = await gwc(['channel', 'create', '--json', '--name', 'main', '--type', 'anthropic', '--base-url', 'https://api.anthropic.com',
      '--models', 'claude-sonnet-4,claude-haiku-4', '--tag', 'prod', '--key-stdin'], 'sk-ant-upstream-secret-1234\n');
    expect(created.stderr).toBe('');
    expect(created.code).toBe(0);
    const ch = JSON.parse(created.stdout);
    expect(ch).toMatchObject({ name: 'main', type: 'anthropic', models: ['claude-sonnet-4', 'claude-haiku-4'], tag: 'prod', status: 1 });
    expect(created.stdout).not.toContain('upstream-secret');
    const other = (await gw.api('POST', '/api/channel/', { name: 'other', type: 'openai', base_url: 'https://api.openai.com', key: 'sk-o', models: ['gpt-4o'] })).body.data;

    const table = await gwc(['channel', 'list', '--tag', 'prod']);
    expect(table.code).toBe(0);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^ID\s+NAME\s+TYPE\s+STATUS/);
    expect(lines).toHaveLength(3); // header, one row, footer: the tag filter reached the server
    expect(lines[1]).toMatch(new RegExp(`^\\s*${ch.id}\\s+main\\s+anthropic\\s+enabled`));
    expect(lines[2]).toBe('page 1/1, 1 total');

    const upd = await gwc(['channel', 'update', String(ch.id), '--priority', '7', '--model-mapping', '{"claude-sonnet-4":"claude-sonnet-4-20250514"}']);
    expect(upd.stdout).toBe(`Updated channel ${ch.id} (main).\n`);
    const after = (await gw.api('GET', `/api/channel/${ch.id}`)).body.data;
    expect(after).toMatchObject({ priority: 7, model_mapping: { 'claude-sonnet-4': 'claude-sonnet-4-20250514' }, key: ch.key });
    const pol = await gwc(['channel', 'update', String(ch.id), '--header-policy', '{"forward_headers":["X-App"],"beta_strip":["*"]}']);
    expect(pol.code).toBe(0);
    expect((await gw.api('GET', `/api/channel/${ch.id}`)).body.data.header_policy).toMatchObject({ forward_headers: ['x-app'], beta_strip: ['*'] });

    const dis = await gwc(['channel', 'disable-tag', 'prod']);
    expect(dis.stdout).toBe("Disabled 1 channel(s) tagged 'prod'.\n");
    expect((await gw.api('GET', `/api/channel/${ch.id}`)).body.data.status).toBe(2);

    const del = await gwc(['channel', 'batch-delete', String(ch.id), String(other.id), '--json']);
    expect(JSON.parse(del.stdout)).toEqual({ deleted: 2 });
    expect((await gw.api('GET', '/api/channel/')).body.data.total).toBe(0);
  });

  test('test: 0 when the upstream answers, 1 (with the result printed) when it fails', async () => {
    // A local stand-in for the Anthropic API: model "good" answers, anything else is a 500.
    const upstream = Bun.serve({
      port: 0, hostname: '127.0.0.1',
      async fetch(req) {
        const body = await req.json() as { model: string };
        if (body.model !== 'good') return Response.json({ type: 'error', error: { type: 'api_error', message: 'boom' } }, { status: 500 });
        return Response.json({ id: 'msg_1', type: 'message', role: 'assistant', model: 'good', content: [{ type: 'text', text: 'p' }],
          stop_reason: 'max_tokens', stop_sequence: null, usage: { input_tokens: 1, output_tokens: 1 } });
      },
    });
    try {
      const ch = (await gw.api('POST', '/api/channel/', { name: 't', type: 'anthropic', base_url: `http://127.0.0.1:${upstream.port}`, key: 'k', models: ['good', 'bad'] })).body.data;
      const good = await gwc(['channel', 'test', String(ch.id)]);
      expect(good.code).toBe(0);
      expect(good.stdout).toMatch(/^result\s+ok$/m);
      expect(good.stdout).toMatch(/^upstream status\s+200$/m);
      const bad = await gwc(['channel', 'test', String(ch.id), '--model', 'bad', '--json']);
      expect(bad.code).toBe(1);
      expect(JSON.parse(bad.stdout)).toMatchObject({ success: false, status: 500 });
      expect(bad.stderr).toStartWith(`error: channel ${ch.id} failed the test: `);
      await gw.api('DELETE', `/api/channel/${ch.id}`);
    } finally {
      upstream.stop(true);
    }
  });

  test('channel key: add from stdin, list masked, disable/enable, remove; rule flags reach the API', async () => {
    const ch = (await gw.api('POST', '/api/channel/', { name: 'multi', type: 'anthropic', base_url: 'https://api.anthropic.com', key: 'sk-cli-first-key-0001', models: ['m'] })).body.data;
    const add = await gwc(['channel', 'key', 'add', String(ch.id), '--stdin'], 'sk-cli-second-key-0002\n\nsk-cli-third-key-00003\n');
    expect(add.stderr).toBe('');
    expect(add.stdout).toBe(`Added 2 key(s) to channel ${ch.id}; it now holds 3.\n`);
    const list = await gwc(['channel', 'key', 'list', String(ch.id)]);
    expect(list.code).toBe(0);
    expect(list.stdout.split('\n')[0]).toMatch(/^ID\s+KEY\s+STATUS/);
    expect(list.stdout.trim().split('\n')).toHaveLength(4);
    for (const k of ['sk-cli-first-key-0001', 'sk-cli-second-key-0002', 'sk-cli-third-key-00003']) expect(list.stdout).not.toContain(k);
    expect((await gwc(['channel', 'key', 'disable', String(ch.id), '2'])).stdout).toBe(`Disabled key 2 of channel ${ch.id}.\n`);
    expect((await gw.api('GET', `/api/channel/${ch.id}/keys`)).body.data.map((k: any) => k.status)).toEqual([1, 2, 1]);
    expect((await gwc(['channel', 'key', 'enable', String(ch.id), '2'])).code).toBe(0);
    expect((await gwc(['channel', 'key', 'remove', String(ch.id), '1'])).stdout).toBe(`Removed key 1 from channel ${ch.id}.\n`);
    expect((await gw.api('GET', `/api/channel/${ch.id}/keys`)).body.data.map((k: any) => [k.id, k.status])).toEqual([[2, 1], [3, 1]]);
    const upd = await gwc(['channel', 'update', String(ch.id), '--key-selection', 'round_robin', '--first-byte-timeout-ms', '2000',
      '--probe-interval-ms', '5000', '--failure-rules', '{"statuses":"500-599","failures":2,"window_requests":5}']);
    expect(upd.code).toBe(0);
    expect((await gw.api('GET', `/api/channel/${ch.id}`)).body.data).toMatchObject({
      key_selection: 'round_robin', first_byte_timeout_ms: 2000, probe_interval_ms: 5000, key_count: 2,
      failure_rules: { statuses: '500-599', failures: 2, window_requests: 5 },
    });
    const last = await gwc(['channel', 'key', 'remove', String(ch.id), '2']);
    expect(last.code).toBe(0);
    const refused = await gwc(['channel', 'key', 'remove', String(ch.id), '3']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('last_channel_key');
    await gw.api('DELETE', `/api/channel/${ch.id}`);
  });

  test('get of an unknown channel is a server refusal (1)', async () => {
    const r = await gwc(['channel', 'get', '424242']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: .+ \(\w+\)\n$/);
  });
});

describe('gw user and gw ledger', () => {
  test('create (password from stdin), disable/enable, update, adjust balance, list ledger, delete', async () => {
    const created = await gwc(['user', 'create', '--username', 'alice', '--display-name', 'Alice', '--quota', '1000', '--password-stdin', '--json'], 'alice-password-1\n');
    expect(created.code).toBe(0);
    const u = JSON.parse(created.stdout);
    expect(u).toMatchObject({ username: 'alice', display_name: 'Alice', quota: 1000, status: 1 });
    expect(created.stdout).not.toContain('alice-password-1');
    expect((await gw.api('POST', '/api/user/login', { username: 'alice', password: 'alice-password-1' }, null)).status).toBe(200);

    const taken = await gwc(['user', 'create', '--username', 'alice', '--password', 'another-password-2']);
    expect(taken.code).toBe(1);
    expect(taken.stderr).toContain('(username_taken)');

    expect((await gwc(['user', 'disable', String(u.id)])).stdout).toBe(`Disabled user ${u.id}.\n`);
    expect((await gw.api('GET', `/api/user/${u.id}`)).body.data.status).toBe(2);
    await gwc(['user', 'update', String(u.id), '--group', 'vip', '--status', '1']);
    expect((await gw.api('GET', `/api/user/${u.id}`)).body.data).toMatchObject({ group: 'vip', status: 1 });

    const adj = await gwc(['ledger', 'adjust', '--user-id', String(u.id), '--amount', '-300', '--note', 'test debit']);
    expect(adj.code).toBe(0);
    expect(adj.stdout).toContain('balance now 700');
    const ledger = JSON.parse((await gwc(['ledger', 'list', '--user-id', String(u.id), '--json'])).stdout);
    expect(ledger.total).toBe(2);
    expect(ledger.items[0]).toMatchObject({ kind: 'adjust', amount: -300, balance_after: 700, note: 'test debit' });

    const list = await gwc(['user', 'list', '--keyword', 'ali']);
    expect(list.stdout).toMatch(/^\s*\d+\s+alice\s+Alice\s+user\s+enabled\s+vip\s+700\b/m);

    expect((await gwc(['user', 'delete', String(u.id)])).code).toBe(0);
    expect((await gw.api('GET', `/api/user/${u.id}`)).status).toBe(404);
  });
});

describe('gw key', () => {
  test('create prints the sk- key once (and it works as a key), list masks it, update, revoke', async () => {
    const created = await gwc(['key', 'create', '--name', 'laptop', '--models', 'claude-sonnet-4', '--rate-limit-rpm', '60']);
    expect(created.code).toBe(0);
    const key = created.stdout.trim();
    expect(key).toMatch(/^sk-\S+$/);
    expect(created.stderr).toContain('shown only now');
    expect(gw.services.apiKeys.lookup(key)).toMatchObject({ name: 'laptop', models: ['claude-sonnet-4'], rateLimitRpm: 60 });

    const list = await gwc(['key', 'list', '--json']);
    const page = JSON.parse(list.stdout);
    expect(list.stdout).not.toContain(key);
    const row = page.items.find((k: any) => k.name === 'laptop');
    expect(key.startsWith(row.prefix)).toBe(true);

    expect((await gwc(['key', 'update', String(row.id), '--status', '2', '--expires-at', '2030-01-01T00:00:00Z'])).code).toBe(0);
    expect((await gw.api('GET', `/api/token/${row.id}`)).body.data).toMatchObject({ status: 2, expires_at: 1893456000 });
    expect((await gwc(['key', 'update', String(row.id), '--model-limits', '{"claude-*":{"rate_limit_tpm":5000}}'])).code).toBe(0);
    expect(gw.services.apiKeys.byId(row.id)?.modelLimits).toEqual({ 'claude-*': { rateLimitRpm: 0, rateLimitTpm: 5000, maxConcurrency: 0 } });
    expect((await gwc(['key', 'get', String(row.id)])).stdout).toMatch(/model limits\s+\{"claude-\*":\{"rate_limit_rpm":0,"rate_limit_tpm":5000,"max_concurrency":0\}\}/);

    expect((await gwc(['key', 'revoke', String(row.id)])).stdout).toBe(`Deleted API key ${row.id}.\n`);
    expect(gw.services.apiKeys.lookup(key)).toBeUndefined();
  });
});

describe('gw topup', () => {
  test('info, create (the only provider by default) printing the checkout URL, list, get', async () => {
    const info = JSON.parse((await gwc(['topup', 'info', '--json'])).stdout);
    expect(info).toEqual((await gw.api('GET', '/api/topup/info')).body.data);
    expect((await gwc(['order', 'list', '--self'])).stdout).toBe('(none)\n');

    const created = await gwc(['topup', 'create', '--amount', '1000']);
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(/^pay at\s+https:\/\/checkout\.example\/cs_test_cli$/m);
    const orders = JSON.parse((await gwc(['order', 'list', '--self', '--status', 'pending', '--json'])).stdout);
    expect(orders.total).toBe(1);
    expect(orders.items[0]).toMatchObject({ provider: 'providerA', amount: 1000, status: 'pending' });
    const one = await gwc(['topup', 'get', orders.items[0].trade_no]);
    expect(one.stdout).toMatch(new RegExp(`^trade no\\s+${orders.items[0].trade_no}$`, 'm'));

    const bad = await gwc(['order', 'list', '--status', 'weird']);
    expect(bad.code).toBe(2);
  });
});

describe('gw pricing', () => {
  test('set (model names with a slash too), list, get, delete', async () => {
    const set = await gwc(['pricing', 'set', 'vendor/model-x', '--input', '3000000', '--output', '15000000', '--cache-read', '300000', '--context-window', '128000']);
    expect(set.code).toBe(0);
    expect(set.stdout).toBe('Set price of vendor/model-x.\n');
    expect(gw.services.relay.prices.get('vendor/model-x')).toMatchObject({ input: 3000000, output: 15000000, cacheRead: 300000, contextWindow: 128000 });

    const list = await gwc(['pricing', 'list']);
    expect(list.stdout).toMatch(/^MODEL\s+INPUT\s+OUTPUT/);
    expect(list.stdout).toMatch(/^vendor\/model-x\s+3000000\s+15000000\s+300000\s+0\b/m);
    const one = JSON.parse((await gwc(['pricing', 'get', 'vendor/model-x', '--json'])).stdout);
    expect(one).toMatchObject({ model: 'vendor/model-x', input: 3000000, context_window: 128000 });
    expect(list.stdout).toMatch(/^MODEL\s+INPUT\s+OUTPUT.*\bCONTEXT\s+WEB SEARCH\b/);
    // No web_search price set: the server's default applies.
    expect(one.web_search).toBeNull();
    expect(list.stdout).toMatch(/^vendor\/model-x\s.*\s128000\s+default\s/m);
    const ws = await gwc(['pricing', 'set', 'vendor/model-x', '--input', '3000000', '--output', '15000000', '--web-search', '50000']);
    expect(ws.code).toBe(0);
    expect(gw.services.relay.prices.get('vendor/model-x')).toMatchObject({ webSearch: 50000 });
    expect(JSON.parse((await gwc(['pricing', 'get', 'vendor/model-x', '--json'])).stdout)).toMatchObject({ web_search: 50000 });
    expect((await gwc(['pricing', 'get', 'vendor/model-x'])).stdout).toMatch(/^vendor\/model-x\s.*\s50000\s/m);
    // Code execution: unset shows as refused (requests with the tool get 403 tool_not_priced); --code-execution sets it.
    expect(list.stdout).toMatch(/\bWEB SEARCH\s+CODE EXEC\s+UPDATED\b/);
    expect(one.code_execution).toBeNull();
    expect(list.stdout).toMatch(/^vendor\/model-x\s.*\s128000\s+default\s+refused\s/m);
    const ce = await gwc(['pricing', 'set', 'vendor/model-x', '--input', '3000000', '--output', '15000000', '--web-search', '50000', '--code-execution', '2084']);
    expect(ce.code).toBe(0);
    expect(gw.services.relay.prices.get('vendor/model-x')).toMatchObject({ webSearch: 50000, codeExecution: 2084 });
    expect(JSON.parse((await gwc(['pricing', 'get', 'vendor/model-x', '--json'])).stdout)).toMatchObject({ code_execution: 2084 });
    expect((await gwc(['pricing', 'get', 'vendor/model-x'])).stdout).toMatch(/^vendor\/model-x\s.*\s50000\s+2084\s/m);
    expect((await gwc(['pricing', 'list'])).stdout).toMatch(/^vendor\/model-x\s.*\s50000\s+2084\s/m);
    const bad = await gwc(['pricing', 'set', 'vendor/model-x', '--input', '3', '--output', '15', '--code-execution', '-1']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('--code-execution');

    const lc = { input: 6, output: 22, cache_read: 1, cache_write: 7, cache_write_1h: 12 };
    const tiers = await gwc(['pricing', 'set', 'vendor/model-x', '--input', '3', '--output', '15', '--cache-write', '4', '--cache-write-1h', '6',
      '--long-context-threshold', '200000', '--long-context', JSON.stringify(lc), '--json']);
    expect(tiers.code).toBe(0);
    expect(JSON.parse(tiers.stdout)).toMatchObject({ cache_write: 4, cache_write_1h: 6, long_context_threshold: 200000, long_context: lc });
    expect((await gwc(['pricing', 'list'])).stdout).toMatch(/^vendor\/model-x\s+3\s+15\s+0\s+4\s+6\s+200000\b/m);
    const half = await gwc(['pricing', 'set', 'vendor/model-x', '--input', '3', '--output', '15', '--long-context-threshold', '1000']);
    expect(half.code).toBe(1);
    expect(half.stderr).toContain('--long-context');
    expect((await gwc(['pricing', 'delete', 'vendor/model-x'])).code).toBe(0);
    const gone = await gwc(['pricing', 'get', 'vendor/model-x']);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toContain('(price_not_found)');
  });
});

describe('gw group', () => {
  test('create, list, update, refused values name the flag, and limit flags on key and user', async () => {
    const created = await gwc(['group', 'create', '--name', 'gold', '--ratio', '1500', '--fallbacks', 'default', '--max-concurrency', '4', '--json']);
    expect(created.code).toBe(0);
    const g = JSON.parse(created.stdout);
    expect(g).toMatchObject({ name: 'gold', ratio: 1500, fallbacks: ['default'], max_concurrency: 4, rate_limit_rpm: 0 });
    expect(gw.services.relay.groups.policy('gold')).toMatchObject({ ratio: 1500, fallbacks: ['default'], maxConcurrency: 4 });
    expect((await gwc(['group', 'list'])).stdout).toMatch(/^\s*\d+\s+gold\s+1500\s+default\b/m);
    expect((await gwc(['group', 'update', String(g.id), '--rate-limit-tpm', '50000'])).code).toBe(0);
    expect(gw.services.relay.groups.policy('gold').rateLimitTpm).toBe(50000);
    const bad = await gwc(['group', 'update', String(g.id), '--ratio', '-1']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('--ratio');
    const key = JSON.parse((await gwc(['key', 'create', '--name', 'lim', '--rate-limit-tpm', '9000', '--max-concurrency', '2', '--json'])).stdout);
    expect(key).toMatchObject({ rate_limit_tpm: 9000, max_concurrency: 2 });
    const user = await gwc(['user', 'update', '1', '--max-concurrency', '7', '--json']);
    expect(JSON.parse(user.stdout)).toMatchObject({ max_concurrency: 7 });
    expect((await gwc(['group', 'delete', String(g.id)])).code).toBe(0);
    expect(gw.services.relay.groups.policy('gold').ratio).toBe(1000);
  });
});

describe('gw log', () => {
  test('list with filters reaches the server (admin and --self)', async () => {
    const now = Math.floor(Date.now() / 1000);
    const row = (requestId: string, model: string, createdAt: number) => ({
      requestId, userId: 1, apiKeyId: 1, channelId: null, model, status: 200, inputTokens: 10, outputTokens: 5, webSearchRequests: 3, codeExecutionRequests: 4, cost: 42, createdAt,
    });
    // Usage rows are written by the relay; seeded here so the listing has something to filter.
    await gw.services.relay.usageLogs.insertOnce(row('req_cli_a', 'model-a', now - 86400 * 10));
    await gw.services.relay.usageLogs.insertOnce(row('req_cli_b', 'model-b', now));
    const admin = JSON.parse((await gwc(['log', 'list', '--model', 'model-b', '--json'])).stdout);
    expect(admin.total).toBe(1);
    expect(admin.items[0]).toMatchObject({ request_id: 'req_cli_b', web_search_requests: 3, code_execution_requests: 4, cost: 42 });
    const since = new Date((now - 86400) * 1000).toISOString();
    const self = await gwc(['log', 'list', '--self', '--from', since]);
    expect(self.code).toBe(0);
    expect(self.stdout).toContain('req_cli_b');
    expect(self.stdout).not.toContain('req_cli_a');
    expect(self.stdout).toContain('page 1/1, 1 total');
    expect(self.stdout).toMatch(/\bCACHE R\s+SEARCHES\s+CODE EXEC\s+COST\b/);
    expect(self.stdout).toMatch(/\s0\s+3\s+4\s+42\s.*req_cli_b/);
  });
});
