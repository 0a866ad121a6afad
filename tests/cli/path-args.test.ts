/**
 * Free-text arguments that become a URL path segment (`pricing get|delete <model>`, `topup get <trade-no>`)
 * address that one resource and no other route: `/`, `?`, `#` stay inside the segment, and `.`, `..` or an
 * empty value, which URL parsing turns into the parent route, are refused before anything is sent.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { cliSandbox, type CliSandbox } from './run-cli';

let gw: TestGateway;
let sb: CliSandbox;
let env: Record<string, string>;
beforeAll(async () => {
  gw = await startGateway();
  sb = cliSandbox();
  env = { GATEWAY_URL: gw.url, GATEWAY_TOKEN: gw.rootToken };
});
afterAll(async () => { await gw.stop(); sb.cleanup(); });

const gwc = (args: string[]) => sb.run(args, { env });

test("'.', '..' and '' never reach another route: usage error, nothing sent", async () => {
  // The gateway refuses these as model names now, but an older one (or a copied database) may hold them; a
  // price that exists shows `pricing get .` reading the list.
  expect((await gw.api('PUT', '/api/pricing/', { model: 'keep', input: 1, output: 1 })).status).toBe(200);
  for (const args of [['pricing', 'get', '.'], ['pricing', 'get', '..'], ['pricing', 'get', ''], ['pricing', 'delete', '.'], ['topup', 'get', '.'], ['topup', 'get', '..']]) {
    const r = await gwc(args);
    // Before: `pricing get .` read GET /api/pricing/ (the list) and printed an empty price with exit 0.
    expect({ args, code: r.code, stdout: r.stdout }).toEqual({ args, code: 2, stdout: '' });
    expect(r.stderr).toContain('cannot be named in a URL path');
  }
  expect((await gw.api('GET', '/api/pricing/')).body.data.map((p: any) => p.model)).toEqual(['keep']);
});

test('slashes, ? and # stay inside the segment', async () => {
  expect((await gw.api('PUT', '/api/pricing/', { model: 'org/m?x#y', input: 5, output: 6 })).status).toBe(200);
  const r = await gwc(['pricing', 'get', 'org/m?x#y', '--json']);
  expect(r.code).toBe(0);
  expect(JSON.parse(r.stdout)).toMatchObject({ model: 'org/m?x#y', input: 5, output: 6 });
  const other = await gwc(['pricing', 'get', '../pricing']);
  expect(other.code).toBe(1);
  expect(other.stderr).toContain('price_not_found');
});
