/**
 * Requests share the event loop with every other request: Bun runs arriving upstream chunks as tasks and
 * polls its sockets only once no task is left, so 100 streams reading as fast as their upstreams send
 * kept one loop turn going for about a second (a /health request waited that long while slow clients'
 * sockets filled). Work that is about to start a read (a stream's next upstream read, a
 * request's first chunk) after the turn has run TURN_BUDGET_MS waits for the next turn (one shared
 * setImmediate), which lets the loop poll its sockets in between.
 */
const TURN_BUDGET_MS = 5;
let turnStartedAt = performance.now();
let nextTurn: Promise<void> | null = null;
export function turnOver(): Promise<void> | null {
  if (performance.now() - turnStartedAt < TURN_BUDGET_MS) return null;
  return nextTurn ??= new Promise<void>((resolve) => setImmediate(() => {
    nextTurn = null;
    turnStartedAt = performance.now();
    resolve();
  }));
}

