/**
 * Runs `op` until it succeeds, waiting 100 ms, doubling up to 2 s, between tries, for at most `forMs`; then
 * the last error is thrown. For a command lost in a short outage (a Redis reconnect) whose effect would
 * otherwise wait for a lease to lapse: retrying past that lease would be pointless, so `forMs` is that lease.
 * `gone()` true ends it at once (the connection was closed for good). The waits never keep a process alive.
 */
export async function retryFor<T>(op: () => Promise<T>, forMs: number, gone: () => boolean = () => false): Promise<T> {
  const until = performance.now() + forMs;
  for (let wait = 100; ; wait = Math.min(wait * 2, 2_000)) {
    try {
      return await op();
    } catch (err) {
      if (gone() || performance.now() + wait >= until) throw err;
      await new Promise<void>((r) => (setTimeout(r, wait) as { unref?: () => void }).unref?.());
    }
  }
}
