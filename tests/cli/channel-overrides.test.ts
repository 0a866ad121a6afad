/** `gw channel create/update --overrides --billing-model` against a real gateway, and how a bad override reads. */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { cliSandbox, type CliSandbox } from './run-cli';

let gw: TestGateway;
let sb: CliSandbox;
beforeAll(async () => { gw = await startGateway(); sb = cliSandbox(); });
afterAll(async () => { await gw.stop(); sb.cleanup(); });

const gwc = (args: string[]) => sb.run(args, { env: { GATEWAY_URL: gw.url, GATEWAY_TOKEN: gw.rootToken } });

test('overrides and billing model are set, shown and replaced through the CLI', async () => {
  const created = await gwc(['channel', 'create', '--json', '--name', 'ov', '--type', 'openai', '--base-url', 'https://api.openai.com', '--key', 'sk-x',
    '--models', 'o3,gpt-4o', '--billing-model', 'upstream',
    '--overrides', '[{"op":"clamp","path":"max_tokens","max":4096},{"op":"remove","path":"temperature","models":["o3*"]},{"op":"set_header","name":"X-Team","value":"blue"}]']);
  expect(created.stderr).toBe('');
  expect(created.code).toBe(0);
  const ch = JSON.parse(created.stdout);
  const stored = (await gw.api('GET', `/api/channel/${ch.id}`)).body.data;
  expect(stored.billing_model).toBe('upstream');
  expect(stored.overrides).toEqual([
    { op: 'clamp', path: 'max_tokens', max: 4096 }, { op: 'remove', path: 'temperature', models: ['o3*'] }, { op: 'set_header', name: 'x-team', value: 'blue' },
  ]);
  const shown = await gwc(['channel', 'get', String(ch.id)]);
  expect(shown.stdout).toMatch(/overrides\s+\[\{"op":"clamp","path":"max_tokens","max":4096\}/);
  expect(shown.stdout).toMatch(/billing model\s+upstream/);

  const upd = await gwc(['channel', 'update', String(ch.id), '--overrides', '[]', '--billing-model', 'requested']);
  expect(upd.code).toBe(0);
  expect((await gw.api('GET', `/api/channel/${ch.id}`)).body.data).toMatchObject({ overrides: [], billing_model: 'requested' });

  const bad = await gwc(['channel', 'update', String(ch.id), '--overrides', '[{"op":"set_header","name":"authorization","value":"x"}]']);
  expect(bad.code).toBe(1);
  expect(bad.stderr).toStartWith('error: --overrides');
  expect(bad.stderr).toContain('authorization');
  expect(bad.stderr).toContain('(invalid_value)');
});

test('reasoning echo is set, shown and refused when unknown through the CLI', async () => {
  const created = await gwc(['channel', 'create', '--json', '--name', 're', '--type', 'openai', '--base-url', 'http://vllm.local:8000', '--key', 'sk-x',
    '--models', 'kimi-k2-thinking', '--reasoning-echo', 'always']);
  expect(created.code).toBe(0);
  const ch = JSON.parse(created.stdout);
  expect((await gw.api('GET', `/api/channel/${ch.id}`)).body.data.reasoning_echo).toBe('always');
  expect((await gwc(['channel', 'get', String(ch.id)])).stdout).toMatch(/reasoning echo\s+always/);
  const bad = await gwc(['channel', 'update', String(ch.id), '--reasoning-echo', 'sometimes']);
  expect(bad.code).toBe(1);
  expect(bad.stderr).toContain("--reasoning-echo: must be 'auto', 'always' or 'never'");
  expect((await gw.api('GET', `/api/channel/${ch.id}`)).body.data.reasoning_echo).toBe('always');
});
