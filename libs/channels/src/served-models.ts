/**
 * How many channels of any status serve each (group, model): whether a model is served at all (a 503 "none
 * healthy" rather than a 404 "unknown model") without scanning every channel. A client can send any model name,
 * and each unknown one cost a scan of every channel's models (21 ms with 10,000 channels of 100 models).
 */
export class ServedModels {
  private readonly byGroup = new Map<string, Map<string, number>>();

  has(group: string, model: string): boolean {
    return this.byGroup.get(group)?.has(model) ?? false;
  }

  add(c: { groups: string[]; models: string[] }): void {
    for (const g of new Set(c.groups)) {
      let byModel = this.byGroup.get(g);
      if (!byModel) this.byGroup.set(g, (byModel = new Map()));
      for (const m of new Set(c.models)) byModel.set(m, (byModel.get(m) ?? 0) + 1);
    }
  }

  /** Takes back what `add` counted for `c` (same groups and models). */
  remove(c: { groups: string[]; models: string[] }): void {
    for (const g of new Set(c.groups)) {
      const byModel = this.byGroup.get(g);
      if (!byModel) continue;
      for (const m of new Set(c.models)) {
        const n = (byModel.get(m) ?? 0) - 1;
        if (n > 0) byModel.set(m, n);
        else byModel.delete(m);
      }
      if (!byModel.size) this.byGroup.delete(g);
    }
  }

  clear(): void {
    this.byGroup.clear();
  }
}
