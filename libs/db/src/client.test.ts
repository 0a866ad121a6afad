import { afterAll, expect, test } from 'bun:test';
import { Database } from 'bun:sqlite';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from './client';

const dir = mkdtempSync(join(tmpdir(), 'gw-client-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * bun:sqlite's close() leaves a connection with prepared statements open until the garbage collector
 * finalizes them; that last connection then checkpoints and removes the WAL, holding the file's lock for a
 * moment. A process opening the database just then (db:copy right after the gateway stopped) must wait for
 * it, not fail with "database is locked" on its first statement.
 */
test('opening waits for a lock another connection holds for a moment, instead of failing at once', async () => {
  const path = join(dir, 'busy.db');
  openDatabase(path, { checkpointMs: 0 }).close();
  Bun.gc(true); // finalizes the closed connection (see above), so the holder below can lock the file
  const holder = new Database(path);
  holder.exec('PRAGMA busy_timeout = 5000');
  holder.exec('PRAGMA locking_mode = EXCLUSIVE');
  holder.exec('BEGIN EXCLUSIVE');
  const child = Bun.spawn([process.execPath, '-e', `
    import { openDatabase } from ${JSON.stringify(join(import.meta.dir, 'client.ts'))};
    const h = openDatabase(${JSON.stringify(path)}, { checkpointMs: 0 });
    console.log(h.sqlite.query('select count(*) as n from users').get().n);
    h.close();
  `], { stdout: 'pipe', stderr: 'pipe' });
  await Bun.sleep(400);
  holder.exec('COMMIT');
  holder.close();
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  expect({ code, out: out.trim(), err: err.includes('locked') ? err : '' }).toEqual({ code: 0, out: '0', err: '' });
}, 15_000);
