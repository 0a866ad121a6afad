/**
 * `gw log export --out FILE` replaces FILE only when the export arrived whole. It used to truncate FILE as soon as
 * the server answered, so a download cut mid-way left the previous export destroyed and a partial one in its place.
 * Now the export goes to a temporary file (0600, never through a link) next to FILE, renamed over it on success and
 * removed on failure.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cliSandbox, type CliSandbox } from './run-cli';

let sb: CliSandbox;
beforeAll(() => { sb = cliSandbox(); });
afterAll(() => sb.cleanup());

const TOKEN = 'gwm_secret-token-value-1234567890';
const HEADER = 'id,created_at,model\n';
/** A server that sends part of an export and then cuts the connection (or, with `whole`, all of it). */
const exporter = (whole: boolean) => Bun.serve({
  port: 0, hostname: '127.0.0.1',
  fetch: () => new Response(new ReadableStream({
    async pull(c) {
      c.enqueue(new TextEncoder().encode(`${HEADER}1,2026-01-01,new-m\n`));
      await Bun.sleep(50);
      if (whole) c.close(); else c.error(new Error('cut'));
    },
  }), { headers: { 'content-type': 'text/csv' } }),
});
const exportTo = (port: number, out: string) => sb.run(['log', 'export', '--self', '--out', out], { env: { GATEWAY_URL: `http://127.0.0.1:${port}`, GATEWAY_TOKEN: TOKEN } });
const OLD = `${HEADER}9,2025-12-31,old-m\n`;

test('a cut download leaves the previous export as it was and no temporary file', async () => {
  const dir = join(sb.dir, 'cut');
  require('node:fs').mkdirSync(dir);
  const out = join(dir, 'usage.csv');
  writeFileSync(out, OLD, { mode: 0o640 });
  const server = exporter(false);
  try {
    const r = await exportTo(server.port!, out);
    expect(r.code).not.toBe(0); // the cut is a connection failure (exit 3)
    expect(readFileSync(out, 'utf8')).toBe(OLD);
    expect(readdirSync(dir)).toEqual(['usage.csv']);
  } finally {
    server.stop(true);
  }
});

test('a whole download replaces the file (keeping its mode), a new file is 0600, and a link is written through', async () => {
  const dir = join(sb.dir, 'whole');
  require('node:fs').mkdirSync(dir);
  const out = join(dir, 'usage.csv');
  writeFileSync(out, OLD, { mode: 0o640 });
  const server = exporter(true);
  try {
    expect((await exportTo(server.port!, out)).code).toBe(0);
    expect(readFileSync(out, 'utf8')).toBe(`${HEADER}1,2026-01-01,new-m\n`);
    expect(statSync(out).mode & 0o777).toBe(0o640);
    const fresh = join(dir, 'fresh.csv');
    expect((await exportTo(server.port!, fresh)).code).toBe(0);
    expect(statSync(fresh).mode & 0o777).toBe(0o600);
    // latest.csv -> usage.csv: the export lands in usage.csv and the link stays a link.
    const link = join(dir, 'latest.csv');
    symlinkSync('usage.csv', link);
    writeFileSync(out, OLD);
    expect((await exportTo(server.port!, link)).code).toBe(0);
    expect(require('node:fs').lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readFileSync(out, 'utf8')).toBe(`${HEADER}1,2026-01-01,new-m\n`);
    expect(readdirSync(dir).sort()).toEqual(['fresh.csv', 'latest.csv', 'usage.csv']);
  } finally {
    server.stop(true);
  }
});
