/** Holding a store's write so that another request runs in the gap (a race made certain). */

/**
 * Holds the calls of `target[method]` whose arguments `held` picks until `release()`: `reached` resolves when one
 * arrives. The write then runs as it would have, after whatever the test did meanwhile; with `afterWrite` it runs
 * first and its answer is what waits. `restore()` undoes it. Through a cluster this holds node 1's store (gw.services).
 */
export function holdWrites<T extends object, K extends keyof T>(target: T, method: K, held: (args: any[]) => boolean, afterWrite = false) {
  const original = target[method] as (...args: any[]) => Promise<unknown>;
  let release!: () => void;
  const released = new Promise<void>((r) => { release = r; });
  let arrived!: () => void;
  const reached = new Promise<void>((r) => { arrived = r; });
  (target as any)[method] = async function (this: T, ...args: any[]) {
    if (!held(args)) return original.apply(this, args);
    const out = afterWrite ? await original.apply(this, args) : undefined;
    arrived();
    await released;
    return afterWrite ? out : original.apply(this, args);
  };
  return { reached, release, restore: () => { (target as any)[method] = original; } };
}

/** Sends `call`, runs `meanwhile` once its write is held (`hold`), then lets the write go on and answers what `call` answered. */
export async function whileHeld<R>(hold: ReturnType<typeof holdWrites>, call: () => Promise<R>, meanwhile: () => Promise<void>): Promise<R> {
  try {
    const pending = call();
    await hold.reached;
    await meanwhile();
    hold.release();
    return await pending;
  } finally {
    hold.restore();
  }
}
