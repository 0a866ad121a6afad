/**
 * Run as a process (`bun tests/helpers/loaded-packages.ts`): builds the gateway's services on a temp SQLite
 * database as the server entry does and prints, as JSON, which of the packages named in argv it has loaded.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '@gw/core';
import { loadConfig } from '@gw/config';
import { createServices } from '../../apps/server/src/services';
import { listen } from '../../apps/server/src/app';

const dir = mkdtempSync(join(tmpdir(), 'gw-loaded-'));
const s = await createServices(loadConfig({ DATABASE_URL: `sqlite:${join(dir, 'g.db')}`, ROOT_PASSWORD: 'loaded-packages-pw', HOST: '127.0.0.1', PORT: '0' }), silentLogger);
const app = listen(s);
const loaded = Object.keys(require.cache);
console.log(JSON.stringify(Object.fromEntries(process.argv.slice(2).map((p) => [p, loaded.some((k) => k.includes(`/node_modules/${p}/`))]))));
await app.stop();
await s.close();
rmSync(dir, { recursive: true, force: true });
