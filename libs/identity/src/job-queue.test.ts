import { describe, expect, test } from 'bun:test';
import { memoryLogger } from '@gw/core';
import { JobQueue } from './job-queue';

describe('JobQueue.close', () => {
  test('with a grace, queued jobs run before it resolves; later jobs are refused', async () => {
    const { log, lines } = memoryLogger();
    const q = new JobQueue({ log });
    const done: number[] = [];
    for (let i = 0; i < 3; i++) q.enqueue(`job ${i}`, async () => { await Bun.sleep(30); done.push(i); });
    await q.close(2_000);
    expect(done).toEqual([0, 1, 2]);
    expect(q.enqueue('late', async () => { done.push(9); })).toBe(false);
    expect(lines.some((l) => l.includes('job.queue_closed'))).toBe(false);
  });

  test('a job waiting for a retry gets one last attempt at once, and no retry after it', async () => {
    const { log, lines } = memoryLogger();
    const q = new JobQueue({ log, retryDelaysMs: [60_000, 60_000] });
    let tries = 0;
    q.enqueue('flaky', async () => { tries++; throw new Error('421 try later'); });
    await q.idle();
    expect(tries).toBe(1);
    const started = performance.now();
    await q.close(2_000);
    expect(tries).toBe(2);
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(lines.at(-1)).toMatch(/ warn job.failed job=flaky attempts=2 /);
  });

  test('past the grace, what is left is counted (the running job too) and dropped', async () => {
    const { log, lines } = memoryLogger();
    const q = new JobQueue({ log });
    let ran = 0;
    for (let i = 0; i < 3; i++) q.enqueue('slow', async () => { ran++; await Bun.sleep(400); });
    const started = performance.now();
    await q.close(100);
    expect(performance.now() - started).toBeLessThan(350);
    expect(lines.at(-1)).toMatch(/ warn job.queue_closed not_done=3$/);
    await Bun.sleep(500);
    expect(ran).toBe(1);
  });

  test('without a grace nothing more runs, as before', async () => {
    const { log, lines } = memoryLogger();
    const q = new JobQueue({ log, retryDelaysMs: [60_000] });
    q.enqueue('fails', async () => { throw new Error('no'); });
    await q.idle();
    q.close();
    expect(lines.at(-1)).toMatch(/ warn job.queue_closed not_done=1$/);
  });
});
