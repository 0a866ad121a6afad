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

function weightedShuffle<T extends Routable>(tier: T[], rng: () => number): T[] {
  if (tier.length === 1) return tier;
  const rest = tier.slice();
  const allZero = rest.every((c) => c.weight <= 0);
  const w = (c: T) => (allZero ? 1 : Math.max(0, c.weight));
  const out: T[] = [];
  while (rest.length) {
    const total = rest.reduce((s, c) => s + w(c), 0);
    let i = 0;
    if (total > 0) {
      let x = rng() * total;
      for (i = 0; i < rest.length - 1; i++) {
        x -= w(rest[i]!);
        if (x < 0) break;
      }
    }
    out.push(rest.splice(i, 1)[0]!);
  }
  return out;
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
