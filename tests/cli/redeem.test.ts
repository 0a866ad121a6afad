/** `gw code` (admin) and `gw redeem` (user) as subprocesses against a real gateway. */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { cliSandbox, type CliSandbox } from './run-cli';

let gw: TestGateway;
let sb: CliSandbox;
beforeAll(async () => { gw = await startGateway(); sb = cliSandbox(); });
afterAll(async () => { await gw.stop(); sb.cleanup(); });

const as = (token: string) => (args: string[]) => sb.run(args, { env: { GATEWAY_URL: gw.url, GATEWAY_TOKEN: token } });

describe('gw code / gw redeem', () => {
  test('create --out writes a new 0600 CSV and prints no code; the user redeems one; list and batches show it masked', async () => {
    const admin = as(gw.rootToken);
    const out = join(sb.dir, 'promo.csv');
    const r = await admin(['code', 'create', '--batch', 'promo-cli', '--count', '3', '--quota', '2500', '--days', '7', '--out', out]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Created 3 codes in batch promo-cli');
    const lines = readFileSync(out, 'utf8').trim().split('\n');
    expect(lines[0]).toBe('code,batch,quota,expires_at');
    const codes = lines.slice(1).map((l) => l.split(',')[0]!);
    expect(codes).toHaveLength(3);
    for (const c of codes) { expect(c).toMatch(/^gwr_\w{24}$/); expect(r.stdout).not.toContain(c); }
    expect(statSync(out).mode & 0o777).toBe(0o600);

    const u = await makeUser(gw);
    const red = await as(u.token)(['redeem', codes[0]!]);
    expect(red.stderr).toBe('');
    expect(red.code).toBe(0);
    expect(red.stdout).toBe('Redeemed 2500 quota units; balance now 2500.\n');
    expect((await gw.services.users.byId(u.id))!.quota).toBe(2500);

    const again = await as(u.token)(['redeem', codes[0]!]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('(invalid_code)');

    const list = await admin(['code', 'list', '--batch', 'promo-cli', '--json']);
    expect(list.code).toBe(0);
    const items = JSON.parse(list.stdout).items;
    expect(items.map((i: any) => i.status).sort()).toEqual(['redeemed', 'unused', 'unused']);
    for (const c of codes) expect(list.stdout).not.toContain(c);
    const table = await admin(['code', 'list', '--status', 'redeemed']);
    expect(table.stdout).toContain(`${codes[0]!.slice(0, 8)}…`);
    expect(table.stdout).not.toContain(codes[0]!);
    const batches = await admin(['code', 'batches', '--json']);
    expect(JSON.parse(batches.stdout).items[0]).toMatchObject({ batch: 'promo-cli', total: 3, redeemed: 1, unused: 2 });

    const piped = await sb.run(['redeem', '-'], { env: { GATEWAY_URL: gw.url, GATEWAY_TOKEN: u.token }, stdin: `${codes[2]}\n` });
    expect(piped.stderr).toBe('');
    expect(piped.stdout).toBe('Redeemed 2500 quota units; balance now 5000.\n');

    const rv = await admin(['code', 'revoke', 'promo-cli']);
    expect(rv.code).toBe(0);
    expect(rv.stdout).toBe('Revoked 1 unused codes of batch promo-cli.\n');
    expect((await as(u.token)(['redeem', codes[1]!])).code).toBe(1);
  }, 30_000);

  test('--out never overwrites (exit 2, nothing minted); without --out the codes are printed once; users cannot create', async () => {
    const admin = as(gw.rootToken);
    const out = join(sb.dir, 'exists.csv');
    writeFileSync(out, 'keep me\n');
    const r = await admin(['code', 'create', '--batch', 'never', '--count', '1', '--quota', '1', '--out', out]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('already exists');
    expect(readFileSync(out, 'utf8')).toBe('keep me\n');
    expect((await gw.api('GET', '/api/redemption/?batch=never')).body.data.total).toBe(0);

    // A refused create leaves no empty file behind.
    const dupOut = join(sb.dir, 'dup.csv');
    await admin(['code', 'create', '--batch', 'twice', '--count', '1', '--quota', '1']);
    const dup = await admin(['code', 'create', '--batch', 'twice', '--count', '1', '--quota', '1', '--out', dupOut]);
    expect(dup.code).toBe(1);
    expect(dup.stderr).toContain('batch_exists');
    expect(existsSync(dupOut)).toBe(false);

    const printed = await admin(['code', 'create', '--batch', 'printed', '--count', '2', '--quota', '9', '--expires-at', '2030-01-01', '--json']);
    expect(printed.code).toBe(0);
    const data = JSON.parse(printed.stdout);
    expect(data.codes).toHaveLength(2);
    expect(data.expires_at).toBe(Date.parse('2030-01-01') / 1000);

    const bad = await admin(['code', 'create', '--batch', 'b', '--count', '1', '--quota', '1', '--expires-at', '2000-01-01']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('--expires-at');

    const u = await makeUser(gw);
    const denied = await as(u.token)(['code', 'create', '--batch', 'mine', '--count', '1', '--quota', '1']);
    expect(denied.code).toBe(1);
  }, 30_000);
});
