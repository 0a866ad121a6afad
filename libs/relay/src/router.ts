/** A channel as routing sees it. */
export interface Routable {
  id: number;
  priority: number;
  weight: number;
}

/**
 * The order in which channels are tried: highest priority first; inside one priority a weighted
 * random permutation (each pick proportional to weight among the channels not yet picked), so the
 * first choice follows the weights and the fallbacks stay inside the same priority before dropping.
 * A weight of 0 is treated as 1 only when every channel of the tier has weight 0.
 */
export function orderCandidates<T extends Routable>(candidates: readonly T[], rng: () => number = Math.random): T[] {
  if (candidates.length <= 1) return candidates.slice();
  const byPriority = new Map<number, T[]>();
  for (const c of candidates) {
    const tier = byPriority.get(c.priority);
    if (tier) tier.push(c);
    else byPriority.set(c.priority, [c]);
  }
  const out: T[] = [];
  for (const p of [...byPriority.keys()].sort((a, b) => b - a)) out.push(...weightedShuffle(byPriority.get(p)!, rng));
  return out;
}

/**
 * Efraimidis-Spirakis: ordering by u^(1/w) (here its logarithm) draws the same order as picking one channel at a
 * time in proportion to the weights left, in O(n log n). Picking one at a time was O(n^2) on every request: 0.6 ms
 * with 100 channels in a tier, 235 ms with 5,000.
 */
function weightedShuffle<T extends Routable>(tier: T[], rng: () => number): T[] {
  if (tier.length === 1) return tier;
  const allZero = tier.every((c) => c.weight <= 0);
  // 1 - rng() is in (0, 1], so a positive weight never draws -Infinity; weight 0 goes last (sort is stable).
  const keyed = tier.map((c) => {
    const w = allZero ? 1 : Math.max(0, c.weight);
    return { c, k: w > 0 ? Math.log(1 - rng()) / w : -Infinity };
  });
  keyed.sort((a, b) => (a.k === b.k ? 0 : b.k - a.k));
  return keyed.map((x) => x.c);
}

/** A small seeded PRNG (mulberry32), for reproducible routing tests. */
export function seededRng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
