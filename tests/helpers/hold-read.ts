/** Holding a service between its read of a channel and its write, to run another writer in that gap. */
import type { ChannelsStore } from '@gw/db';

/**
 * Test hook: the next `byId` the service makes returns the row it read only when `release()` is called, so
 * whatever the service writes from that row is written after everything the test does meanwhile.
 */
export function holdNextRead(service: object) {
  const s = service as { repo: ChannelsStore };
  const real = s.repo;
  let release!: () => void;
  const gate = new Promise<void>((r) => { release = r; });
  let readDone!: () => void;
  const read = new Promise<void>((r) => { readDone = r; });
  let armed = true;
  s.repo = new Proxy(real, {
    get(target, prop) {
      const v = Reflect.get(target, prop);
      if (prop !== 'byId' || !armed) return typeof v === 'function' ? v.bind(target) : v;
      return async (id: number) => {
        armed = false;
        const row = await target.byId(id);
        readDone();
        await gate;
        return row;
      };
    },
  });
  return { read, release: () => { release(); s.repo = real; } };
}
