/**
 * readCookies runs on every management request before any credential is checked (the cross-site check and the
 * session lookup both read the Cookie header), so its cost is what anyone can make the gateway spend. A Cookie header
 * of ~16 KB (Bun's limit) holds ~1,300 `gw_session` values: de-duplicating them with a list search was quadratic
 * (~6 ms of CPU per read, two reads per request). The cost must grow with the header, not with its square.
 */
import { expect, test } from 'bun:test';
import { readCookies } from './auth';

const header = (n: number) => Array.from({ length: n }, (_, i) => `gw_session=v${i}`).join('; ');

/** The fastest of several timings of `reps` reads, in ms per read. */
function cost(h: string, reps: number): number {
  let best = Infinity;
  for (let run = 0; run < 7; run++) {
    const t0 = performance.now();
    for (let i = 0; i < reps; i++) readCookies(h, 'gw_session');
    best = Math.min(best, (performance.now() - t0) / reps);
  }
  return best;
}

test('values are read in order, once each, malformed encodings skipped, other names ignored', () => {
  expect(readCookies('a=1; gw_session=x; gw_session=%79; gw_session=x; gw_session=%E0%A4%A; b=2; gw_session=y', 'gw_session')).toEqual(['x', 'y']);
  expect(readCookies(null, 'gw_session')).toEqual([]);
});

test('the cost of a header full of distinct session cookies grows linearly, not quadratically', () => {
  const small = header(100);
  const large = header(1_600);
  expect(readCookies(large, 'gw_session')).toHaveLength(1_600);
  cost(small, 50);
  cost(large, 5); // warm-up
  const ratio = cost(large, 20) / cost(small, 320);
  // 16 times the cookies: about 16 times the work when linear, 256 times when quadratic.
  expect(ratio).toBeLessThan(48);
});
