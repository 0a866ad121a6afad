/**
 * Helpers for two-node tests where node B follows node A's writes through the change feed (a cache's reads are
 * counted to prove a burst was applied in batches).
 */

/** `store` with `methods` counted: each call runs `onRead` first, then the real method. */
export function countReads<T extends object>(store: T, methods: Array<keyof T>, onRead: () => void): T {
  const counted = Object.create(store) as T;
  for (const m of methods) {
    const real = store[m] as unknown as (...args: unknown[]) => unknown;
    (counted as Record<keyof T, unknown>)[m] = (...args: unknown[]) => { onRead(); return real.apply(store, args); };
  }
  return counted;
}

/** Polls every 5 ms until `cond` holds; fails after `ms`. */
export async function until(ms: number, cond: () => boolean): Promise<void> {
  const t0 = performance.now();
  while (!cond()) {
    if (performance.now() - t0 > ms) throw new Error(`condition not met within ${ms} ms`);
    await Bun.sleep(5);
  }
}
