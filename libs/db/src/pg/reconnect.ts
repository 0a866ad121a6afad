/**
 * postgres.js's delay before reconnecting (its `backoff` option, in seconds), bounded at 1 s.
 *
 * Its default, jitter × min(3^n / 100, 20) s, counts n across every connection of a client and resets
 * it only when a connection succeeds: an outage of one second that failed ten busy pool connections,
 * with requests still arriving, brought n to about 20, and queries then waited 10–20 s after the
 * database was back (measured up to 18 s), past the settlement's retry deadline, so a request served
 * meanwhile was answered without its charge committed. Bounded, every connection tries again within
 * a second; while the database stays down that is at most one attempt per connection per 0.5–1 s.
 */
export function reconnectBackoff(retries: number): number {
  return (0.5 + Math.random() / 2) * Math.min(3 ** retries / 100, 1);
}
