import { expect, test } from 'bun:test';
import { everyWhileLeader, type Leader } from './leader';

/** A leader the test hands leadership to and takes it from. */
function switchable(initially: boolean) {
  const fns = new Set<(l: boolean) => void>();
  const leader = {
    isLeader: initially,
    onChange(fn: (l: boolean) => void) { fns.add(fn); return () => fns.delete(fn); },
    async close() {},
    set(l: boolean) { leader.isLeader = l; for (const fn of fns) fn(l); },
  };
  return leader as Leader & { set(l: boolean): void };
}

async function until(cond: () => boolean, ms = 2_000): Promise<void> {
  for (const t0 = performance.now(); !cond(); await Bun.sleep(5)) {
    if (performance.now() - t0 > ms) throw new Error(`condition not met within ${ms} ms`);
  }
}

test('a pass in batches stops at its next batch once leadership is lost, and does not run again until regained', async () => {
  const leader = switchable(true);
  let batches = 0;
  let passes = 0;
  const stop = everyWhileLeader(leader, 20, async (signal) => {
    passes++;
    while (!signal.aborted && batches < 1_000) { batches++; await Bun.sleep(5); }
  }, { atOnce: true });
  await until(() => batches >= 3);
  leader.set(false);
  const atLoss = batches;
  await Bun.sleep(100);
  // The batch under way when leadership went may end; no other starts, and no new pass.
  expect(batches).toBeLessThanOrEqual(atLoss + 1);
  expect(passes).toBe(1);
  leader.set(true);
  await until(() => passes === 2 && batches > atLoss + 1);
  await stop();
});

test('stop resolves only after the running pass has ended, and no pass starts after it', async () => {
  const leader = switchable(true);
  let release!: () => void;
  let ended = false;
  let passes = 0;
  const stop = everyWhileLeader(leader, 10, async () => {
    passes++;
    await new Promise<void>((r) => { release = r; });
    ended = true;
  }, { atOnce: true });
  await until(() => passes === 1);
  let stopped = false;
  const stopping = stop().then(() => { stopped = true; });
  await Bun.sleep(50);
  expect(stopped).toBe(false);
  release();
  await stopping;
  expect(ended).toBe(true);
  await Bun.sleep(50);
  expect(passes).toBe(1);
});

test('passes never overlap on a node; a failing pass is reported and the schedule goes on', async () => {
  const leader = switchable(false);
  let live = 0;
  let most = 0;
  let passes = 0;
  const errors: unknown[] = [];
  const stop = everyWhileLeader(leader, 5, async () => {
    passes++;
    most = Math.max(most, ++live);
    await Bun.sleep(30);
    live--;
    if (passes === 1) throw new Error('boom');
  }, { onError: (e) => errors.push(e) });
  await Bun.sleep(40);
  // Not leading: nothing runs.
  expect(passes).toBe(0);
  leader.set(true);
  await until(() => passes >= 3);
  await stop();
  expect(most).toBe(1);
  expect(errors.length).toBe(1);
});

test('the stop waits for a running pass, but only stopGraceMs for one stuck inside a unit of work', async () => {
  const leader = switchable(true);
  let finish!: () => void;
  const stuck = new Promise<void>((r) => { finish = r; });
  let started = false;
  const stop = everyWhileLeader(leader, 1_000, async () => { started = true; await stuck; }, { atOnce: true, stopGraceMs: 150 });
  await until(() => started);
  const t0 = performance.now();
  await stop();
  const ms = performance.now() - t0;
  expect(ms).toBeGreaterThanOrEqual(140);
  expect(ms).toBeLessThan(1_000);
  finish();
  // A pass that ends within the grace is waited for to its end.
  let ended = false;
  const stop2 = everyWhileLeader(leader, 1_000, async () => { await Bun.sleep(50); ended = true; }, { atOnce: true, stopGraceMs: 5_000 });
  await stop2();
  expect(ended).toBe(true);
});
