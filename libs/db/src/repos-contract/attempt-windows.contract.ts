/**
 * The attempt-window stores (SQLite's and PostgreSQL's attempt_windows) under one contract: the periodic sweep
 * deletes rows idle for two windows and nothing else, at most SWEEP_CHUNK rows at a time, and finds them by an
 * index range, never by reading the whole table. A flood of logins or reset requests from many addresses (each
 * one a key) can leave hundreds of thousands of live rows; a sweep that scanned them all every 1024 hits would
 * spend that much of the event loop (SQLite) or the shared pool (PostgreSQL) each time.
 * Called from repos-contract/sqlite.test.ts and repos-pg/contract.test.ts.
 */
import { expect, test } from 'bun:test';
import type { AttemptWindows } from '@gw/core';
import { SWEEP_CHUNK } from '../attempt-sweep';

export interface AttemptWindowsEnv {
  windows(opts?: { sweepEvery?: number }): AttemptWindows;
  /** One sweep at `now`; resolves to the rows it deleted. */
  sweep(now: number): Promise<number>;
  /** Stored keys (flow-prefixed), sorted. */
  keys(): Promise<string[]>;
  /** `n` rows `${prefix}${i}` of one count each, all in the window of length `windowMs` starting at `start`. */
  fill(n: number, prefix: string, start: number, windowMs: number): Promise<void>;
  /** The sweep statement's query plan as text, with sequential scans disfavoured where the planner has them. */
  sweepPlan(now: number): Promise<string>;
  close(): Promise<void>;
}

const MIN = 60_000;
/** A window boundary for one-minute and one-day windows alike. */
const T0 = 1_800_000_000_000 - (1_800_000_000_000 % 86_400_000);

export function attemptWindowsContract(make: () => Promise<AttemptWindowsEnv>): void {
  /** A test body on a fresh env, closed whatever the body does. */
  const on = (body: (env: AttemptWindowsEnv) => Promise<void>) => async () => {
    const env = await make();
    try {
      await body(env);
    } finally {
      await env.close();
    }
  };

  test('a sweep deletes the rows idle for two windows, whatever their length, and keeps every count as it was', on(async (env) => {
    let now = T0;
    const minute = env.windows()('login-ip', MIN, () => now);
    const day = env.windows()('2fa-day', 86_400_000, () => now);
    await minute.hit('idle', 10);
    await minute.hit('moved', 10); // hit again in the next window: its row's start moves on (the upsert's update)
    await day.hit('daily', 10);
    now = T0 + MIN + 5_000;
    await minute.hit('moved', 10);
    await minute.hit('recent', 10);
    now = T0 + 2 * MIN; // exactly two windows after `idle`'s start: idle from now on
    const before = await Promise.all([minute.count('idle'), minute.count('moved'), minute.count('recent'), day.count('daily')]);
    expect(await env.sweep(now)).toBe(1);
    expect(await env.keys()).toEqual(['2fa-day:daily', 'login-ip:moved', 'login-ip:recent']);
    // Counting does not see the sweep: what it deleted already counted nothing.
    expect(await Promise.all([minute.count('idle'), minute.count('moved'), minute.count('recent'), day.count('daily')])).toEqual(before);
    expect(before).toEqual([0, 1, 1, 1]);
    now = T0 + 3 * MIN;
    expect(await env.sweep(now)).toBe(2);
    expect(await env.keys()).toEqual(['2fa-day:daily']);
    expect(await env.sweep(T0 + 2 * 86_400_000 - 1)).toBe(0);
    expect(await env.sweep(T0 + 2 * 86_400_000)).toBe(1);
  }));

  test('hits sweep by themselves every sweepEvery hits', on(async (env) => {
    await env.fill(3, 'login-ip:old', T0, MIN);
    const w = env.windows({ sweepEvery: 4 })('login-ip', MIN, () => T0 + 10 * MIN);
    for (let i = 0; i < 3; i++) await w.hit(`a${i}`, 10);
    expect((await env.keys()).filter((k) => k.startsWith('login-ip:old'))).toHaveLength(3);
    await w.hit('a3', 10);
    // PostgreSQL's sweep runs beside the hit, not before its answer.
    for (let i = 0; i < 100 && (await env.keys()).some((k) => k.startsWith('login-ip:old')); i++) await Bun.sleep(20);
    expect(await env.keys()).toEqual(['login-ip:a0', 'login-ip:a1', 'login-ip:a2', 'login-ip:a3']);
  }));

  test('one sweep deletes at most SWEEP_CHUNK rows; the next ones take the rest, live rows stay', on(async (env) => {
    await env.fill(SWEEP_CHUNK + 100, 'login-ip:idle', T0, MIN);
    await env.fill(50, 'login-ip:live', T0 + 2 * MIN, MIN);
    const now = T0 + 2 * MIN + 1;
    expect(await env.sweep(now)).toBe(SWEEP_CHUNK);
    expect(await env.sweep(now)).toBe(100);
    expect(await env.sweep(now)).toBe(0);
    expect((await env.keys()).every((k) => k.startsWith('login-ip:live'))).toBe(true);
    expect(await env.keys()).toHaveLength(50);
  }));

  test('the sweep finds its rows by an index range on the expiry, not by reading the table', on(async (env) => {
    await env.fill(2_000, 'login-ip:live', T0, MIN);
    const plan = await env.sweepPlan(T0);
    expect(plan).toContain('attempt_windows_expires_idx');
    // SQLite's full reads say SCAN (of the table or of a whole index), PostgreSQL's say Seq Scan.
    expect(plan).not.toMatch(/\bSCAN\b|Seq Scan/);
  }));
}
