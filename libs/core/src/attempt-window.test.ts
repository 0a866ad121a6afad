import { expect, test } from 'bun:test';
import { boundedWindows, localWindows, rememberRefusals, type AttemptWindows } from './attempt-window';

test('local attempt windows: count, hit up to the limit then a wait in seconds, reset; flows and keys apart', async () => {
  const w = localWindows('login-ip', 60_000);
  const other = localWindows('redeem', 60_000);
  expect(await w.count('1.2.3.4')).toBe(0);
  for (let i = 0; i < 3; i++) expect(await w.hit('1.2.3.4', 3)).toBe(0);
  const wait = await w.hit('1.2.3.4', 3);
  expect(wait).toBeGreaterThanOrEqual(1);
  expect(wait).toBeLessThanOrEqual(60);
  expect(Math.floor(await w.count('1.2.3.4'))).toBe(3);
  expect(await w.count('5.6.7.8')).toBe(0);
  expect(await other.count('1.2.3.4')).toBe(0);
  await w.reset('1.2.3.4');
  expect(await w.count('1.2.3.4')).toBe(0);
  expect(await w.hit('1.2.3.4', 3)).toBe(0);
});

test('rememberRefusals answers a refused key from memory for at most its time to live, and forgets it on reset', async () => {
  let now = 1_000_000;
  const calls: string[] = [];
  // A store that refuses key "x" under limit 1 with a 30 s wait, and counts every call it gets.
  const store: AttemptWindows = () => ({
    count: async () => 0,
    hit: async (key, limit) => { calls.push(`${key}/${limit}`); return key === 'x' && limit === 1 ? 30 : 0; },
    reset: async (key) => { calls.push(`reset ${key}`); },
  });
  const w = rememberRefusals(store, 1000)('login-ip', 60_000, () => now);
  expect(await w.hit('x', 1)).toBe(30);
  now += 500;
  // Within the second: from memory, with the refusal's own retry time going down.
  expect(await w.hit('x', 1)).toBe(30);
  expect(calls).toEqual(['x/1']);
  // Another limit or another key asks the store.
  expect(await w.hit('x', 5)).toBe(0);
  expect(await w.hit('y', 1)).toBe(0);
  now += 600;
  // Past the second: the store is asked again.
  expect(await w.hit('x', 1)).toBe(30);
  expect(calls).toEqual(['x/1', 'x/5', 'y/1', 'x/1']);
  await w.reset('x');
  expect(await w.hit('x', 1)).toBe(30);
  expect(calls.slice(-2)).toEqual(['reset x', 'x/1']);
});

test('boundedWindows runs `slots` counts or hits at once, queues `queue` more, refuses the rest at once; resets pass', async () => {
  let running = 0;
  let most = 0;
  let open!: () => void;
  const gate = new Promise<void>((r) => { open = r; });
  const held = async () => { running++; most = Math.max(most, running); await gate; running--; };
  const resets: string[] = [];
  const store: AttemptWindows = () => ({
    count: async () => { await held(); return 0; },
    hit: async () => { await held(); return 0; },
    reset: async (key) => { resets.push(key); },
  });
  const w = boundedWindows(store, 2, 3)('login-ip', 60_000);
  const calls = [w.hit('a', 5), w.count('b'), w.hit('c', 5), w.hit('d', 5), w.count('e')];
  const refused = await Promise.allSettled([w.hit('f', 5), w.count('g')]);
  expect(refused.map((r) => r.status === 'rejected' && (r.reason as { status: number; code: string }))).toEqual([
    expect.objectContaining({ status: 503, code: 'attempt_checks_busy' }), expect.objectContaining({ status: 503, code: 'attempt_checks_busy' }),
  ]);
  await w.reset('a');
  expect(resets).toEqual(['a']);
  expect(running).toBe(2);
  open();
  expect(await Promise.all(calls)).toEqual([0, 0, 0, 0, 0]);
  expect(most).toBe(2);
});
