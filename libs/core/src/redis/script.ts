import type { ChainableCommander, Redis } from 'ioredis';

/**
 * One Lua script registered on an ioredis connection (`defineCommand`: EVALSHA, falling back to
 * EVAL after NOSCRIPT, e.g. when the server restarted). Scripts read the clock with `TIME`, so
 * every node agrees on lease expiries and window boundaries whatever its own clock says.
 */
export interface Script {
  (keys: string[], args: Array<string | number>): Promise<unknown>;
  /** Queues the call on a pipeline (same round trip as the pipeline's other commands). */
  on(pipe: ChainableCommander, keys: string[], args: Array<string | number>): ChainableCommander;
}

/** `numberOfKeys` null: the call passes the key count as its first key argument (variable batches). */
export function defineScript(redis: Redis, name: string, numberOfKeys: number | null, lua: string): Script {
  redis.defineCommand(name, numberOfKeys === null ? { lua } : { numberOfKeys, lua });
  const call = (target: unknown, keys: string[], args: Array<string | number>) =>
    (target as Record<string, (...a: Array<string | number>) => unknown>)[name]!(...keys, ...args);
  const run = ((keys, args) => call(redis, keys, args) as Promise<unknown>) as Script;
  run.on = (pipe, keys, args) => call(pipe, keys, args) as ChainableCommander;
  return run;
}

/** Lua prologue: `now` = the server's time in ms. */
export const LUA_NOW = `local __t = redis.call('TIME')
local now = tonumber(__t[1]) * 1000 + math.floor(tonumber(__t[2]) / 1000)
`;
