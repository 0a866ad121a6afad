/**
 * scripts/ci-services.sh, as .ci/run calls it: on a machine whose services are up it must succeed
 * silently and quickly (it runs before every CI run), and leave PostgreSQL and Redis answering.
 */
import { expect, test } from 'bun:test';
import { join } from 'node:path';
import { pgReachable, requirePg } from '../helpers/postgres';

const SCRIPT = join(import.meta.dir, '..', '..', 'scripts', 'ci-services.sh');
// Only where the services already run: a test run must never install or start servers itself.
const available = await requirePg('tests/e2e/ci-services.test.ts');

test.skipIf(!available)('ci-services.sh is idempotent, quiet on success, and leaves PostgreSQL and Redis reachable', async () => {
  for (let run = 0; run < 2; run++) {
    const started = performance.now();
    const proc = Bun.spawn(['bash', SCRIPT], { stdout: 'pipe', stderr: 'pipe', stdin: 'ignore' });
    const timer = setTimeout(() => proc.kill(9), 120_000);
    const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    clearTimeout(timer);
    expect({ run, code, out, err }).toEqual({ run, code: 0, out: '', err: '' });
    // The second run finds everything up and only probes.
    if (run === 1) expect(performance.now() - started).toBeLessThan(5_000);
  }
  expect(await pgReachable('postgres://postgres@127.0.0.1:5432/test')).toBe(true);
  const redis = Bun.spawnSync(['redis-cli', '-h', '127.0.0.1', '-p', '6379', 'ping']);
  expect(redis.stdout.toString().trim()).toBe('PONG');
}, 150_000);
