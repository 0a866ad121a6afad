/**
 * A small Prometheus registry: counters and histograms with labels, gauges read at scrape time, and
 * the text exposition format. In memory and O(1) per observation, so the request path can afford it;
 * label values must come from bounded sets (route templates, model and channel names, status codes).
 */

type Labels = Record<string, string | number>;

const NEEDS_ESCAPE = /[\\"\n]/;
const escape = (v: string) => (NEEDS_ESCAPE.test(v) ? v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n') : v);
// Runs several times per request (every counter and histogram update): one string built in a loop, no arrays.
const labelText = (l: Labels) => {
  let out = '';
  for (const k in l) out += `${out ? ',' : '{'}${k}="${escape(String(l[k]))}"`;
  return out ? `${out}}` : '';
};

/**
 * The series key of a label set, remembered per metric by label name and value: building the text (a
 * string per label, the escape check) on every update cost more than the update itself. Bounded like the
 * series: label values come from bounded sets.
 */
type KeyNode = Map<unknown, KeyNode> & { text?: string };
function keyOf(root: KeyNode, l: Labels): string {
  let n = root;
  for (const k in l) {
    let byName = n.get(k);
    if (!byName) n.set(k, (byName = new Map()));
    const v = l[k];
    let next = byName.get(v);
    if (!next) byName.set(v, (next = new Map()));
    n = next;
  }
  return (n.text ??= labelText(l));
}

interface Metric {
  render(): string;
}

export class Counter implements Metric {
  private readonly values = new Map<string, number>();
  private readonly keys: KeyNode = new Map();

  constructor(readonly name: string, readonly help: string) {}

  inc(labels: Labels = {}, by = 1): void {
    const k = keyOf(this.keys, labels);
    this.values.set(k, (this.values.get(k) ?? 0) + by);
  }

  /** The current value for exactly these labels (0 when never incremented). */
  get(labels: Labels = {}): number {
    return this.values.get(keyOf(this.keys, labels)) ?? 0;
  }

  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`];
    for (const [k, v] of this.values) lines.push(`${this.name}${k} ${v}`);
    return lines.join('\n');
  }
}

export class Histogram implements Metric {
  private readonly series = new Map<string, { counts: number[]; sum: number; count: number; labels: Labels }>();
  private readonly keys: KeyNode = new Map();

  constructor(readonly name: string, readonly help: string, private readonly buckets: number[]) {}

  observe(labels: Labels, value: number): void {
    const k = keyOf(this.keys, labels);
    let s = this.series.get(k);
    if (!s) this.series.set(k, (s = { counts: new Array(this.buckets.length).fill(0), sum: 0, count: 0, labels }));
    for (let i = 0; i < this.buckets.length; i++) if (value <= this.buckets[i]!) s.counts[i]!++;
    s.sum += value;
    s.count++;
  }

  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    for (const s of this.series.values()) {
      this.buckets.forEach((b, i) => lines.push(`${this.name}_bucket${labelText({ ...s.labels, le: b })} ${s.counts[i]}`));
      lines.push(`${this.name}_bucket${labelText({ ...s.labels, le: '+Inf' })} ${s.count}`);
      lines.push(`${this.name}_sum${labelText(s.labels)} ${s.sum}`);
      lines.push(`${this.name}_count${labelText(s.labels)} ${s.count}`);
    }
    return lines.join('\n');
  }
}

/** A gauge whose samples are read when scraped (channel status, queue depth, live sessions). */
export class Gauge implements Metric {
  constructor(readonly name: string, readonly help: string, private readonly read: () => Array<[Labels, number]>) {}

  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} gauge`];
    for (const [l, v] of this.read()) lines.push(`${this.name}${labelText(l)} ${v}`);
    return lines.join('\n');
  }
}

export class MetricsRegistry {
  private readonly metrics: Metric[] = [];

  counter(name: string, help: string): Counter {
    return this.add(new Counter(name, help));
  }

  histogram(name: string, help: string, buckets: number[]): Histogram {
    return this.add(new Histogram(name, help, buckets));
  }

  gauge(name: string, help: string, read: () => Array<[Labels, number]>): Gauge {
    return this.add(new Gauge(name, help, read));
  }

  private add<M extends Metric>(m: M): M {
    this.metrics.push(m);
    return m;
  }

  /** Prometheus text exposition format 0.0.4. */
  render(): string {
    return `${this.metrics.map((m) => m.render()).join('\n')}\n`;
  }
}
