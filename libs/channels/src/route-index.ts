/** What the index needs of a channel to place it. */
export interface Routable {
  id: number;
  priority: number;
  groups: string[];
  models: string[];
}

/** Priority descending, then id ascending: the order candidates are offered in. */
const before = (a: Routable, b: Routable) => b.priority - a.priority || a.id - b.id;

/** First position in `list` (sorted by `before`) whose entry does not come before `c`. */
function lowerBound(list: Routable[], c: Routable): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (before(list[mid]!, c) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * group → model → channels, kept sorted by priority desc then id. A channel is added or removed in place
 * (binary search + splice within its own lists), so one channel's change costs the same whether the
 * gateway holds ten channels or a hundred thousand: nothing is rebuilt.
 */
export class RouteIndex<C extends Routable> {
  private readonly byGroup = new Map<string, Map<string, C[]>>();

  /** The sorted list for (group, model); the caller must not modify it. */
  list(group: string, model: string): readonly C[] | undefined {
    return this.byGroup.get(group)?.get(model);
  }

  /** Models with at least one channel for `group` (unsorted). */
  models(group: string): IterableIterator<string> | undefined {
    return this.byGroup.get(group)?.keys();
  }

  add(c: C): void {
    for (const g of new Set(c.groups)) {
      let byModel = this.byGroup.get(g);
      if (!byModel) this.byGroup.set(g, (byModel = new Map()));
      for (const m of new Set(c.models)) {
        const list = byModel.get(m);
        if (!list) byModel.set(m, [c]);
        else list.splice(lowerBound(list, c), 0, c);
      }
    }
  }

  /** Removes `c` as it was added (same groups, models, priority and id). */
  remove(c: C): void {
    for (const g of new Set(c.groups)) {
      const byModel = this.byGroup.get(g);
      if (!byModel) continue;
      for (const m of new Set(c.models)) {
        const list = byModel.get(m);
        if (!list) continue;
        let i = lowerBound(list, c);
        if (list[i] !== c) i = list.indexOf(c);
        if (i < 0) continue;
        list.splice(i, 1);
        // An empty list would make models() name a model nobody serves.
        if (!list.length) byModel.delete(m);
      }
      if (!byModel.size) this.byGroup.delete(g);
    }
  }

  clear(): void {
    this.byGroup.clear();
  }
}
