/**
 * Attack on files at rest from someone who can write into a shared data folder (README: "an existing
 * folder keeps its mode (it may be shared)"): plant symbolic links under the names the gateway creates.
 * Before, a `<db>.lock.pid` link made start-up chmod its target 0600 and overwrite it with the pid; a
 * `secret.key` link was read as the sealing key; journal segments were appended through links. Now every
 * file the gateway owns is opened without following a final-component link, and start-up refuses with
 * one line naming the path. A symlinked data *folder* keeps working. Real gateway processes.
 */
import { afterAll, expect, test } from 'bun:test';
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startGatewayProcess } from '../helpers/gateway-process';

const base = mkdtempSync(join(tmpdir(), 'gw-attack-files-'));
const procs = new Set<Bun.Subprocess>();
afterAll(() => {
  for (const p of procs) p.kill(9);
  rmSync(base, { recursive: true, force: true });
});

const mode = (p: string) => (statSync(p).mode & 0o777).toString(8);
const env = (db: string) => ({ DATABASE_URL: `sqlite:${db}`, PORT: '0', HOST: '127.0.0.1', ROOT_PASSWORD: 'attack-root-pass-1', SECRET_KEY: undefined });

/** Runs the gateway until it listens (then stops it) or exits; returns its exit code and stderr. */
async function run(db: string): Promise<{ started: boolean; code: number | null; stderr: string }> {
  try {
    const g = await startGatewayProcess(env(db), procs);
    g.proc.kill('SIGTERM');
    await g.proc.exited;
    return { started: true, code: g.proc.exitCode, stderr: '' };
  } catch (e) {
    return { started: false, code: 1, stderr: String((e as Error).message) };
  }
}

/** A fresh data folder with a victim file outside it. */
function scene(name: string) {
  const dir = join(base, name);
  mkdirSync(dir, { mode: 0o755 });
  const victim = join(base, `${name}-victim.txt`);
  writeFileSync(victim, 'precious\n', { mode: 0o644 });
  return { dir, db: join(dir, 'gw.db'), victim };
}

for (const planted of ['gw.db.lock.pid', 'gw.db.lock', 'gw.db', 'secret.key', 'gw.db-wal']) {
  test(`a planted link at ${planted} stops start-up with one line naming it; its target is untouched`, async () => {
    const s = scene(`plant-${planted.replace(/\W/g, '_')}`);
    symlinkSync(s.victim, join(s.dir, planted));
    const r = await run(s.db);
    expect(r.started).toBe(false);
    expect(r.stderr).toContain(`${planted} is a symbolic link`);
    expect(readFileSync(s.victim, 'utf8')).toBe('precious\n');
    expect(mode(s.victim)).toBe('644');
  }, 20_000);
}

test('a journal folder left 0755 is tightened to 0700, and a planted segment link is never written through', async () => {
  const s = scene('journal');
  mkdirSync(join(s.dir, 'gw.db.settlements'), { mode: 0o755 });
  symlinkSync(s.victim, join(s.dir, 'gw.db.settlements', 'settle-1.jsonl'));
  // The journal replays and removes leftover segments at start-up; a link is not a segment it can read.
  const r = await run(s.db);
  expect(readFileSync(s.victim, 'utf8')).toBe('precious\n');
  if (r.started) expect(mode(join(s.dir, 'gw.db.settlements'))).toBe('700');
}, 20_000);

test('a symlinked data folder works, and files left 0644 by an older version are tightened', async () => {
  const real = join(base, 'real');
  mkdirSync(real, { mode: 0o755 });
  symlinkSync(real, join(base, 'data'));
  writeFileSync(join(real, 'secret.key'), 'ab'.repeat(32), { mode: 0o644 });
  mkdirSync(join(real, 'gw.db.settlements'), { mode: 0o755 });
  const r = await run(join(base, 'data', 'gw.db'));
  expect(r.started).toBe(true);
  for (const f of readdirSync(real)) {
    const p = join(real, f);
    expect(lstatSync(p).isSymbolicLink()).toBe(false);
    expect([f, mode(p)]).toEqual([f, f.endsWith('.settlements') ? '700' : '600']);
  }
}, 20_000);
