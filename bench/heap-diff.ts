/**
 * `bun bench/heap-diff.ts before.json after.json [streams]`: what the heap gained between two V8-format
 * snapshots (bench/gc-on-signal.ts with BENCH_HEAP_SNAPSHOT), grouped by node type and name (a closure's
 * name is its function's; an object's its constructor's), largest first; with `streams`, also per stream.
 * Finds which objects each held stream keeps alive.
 */
import { readFileSync } from 'node:fs';

type Tally = Map<string, { count: number; bytes: number }>;
function tally(path: string): Tally {
  const j = JSON.parse(readFileSync(path, 'utf8'));
  const f: string[] = j.snapshot.meta.node_fields;
  const types: string[] = j.snapshot.meta.node_types[0];
  const [ti, ni, si, ei] = ['type', 'name', 'self_size', 'edge_count'].map((k) => f.indexOf(k));
  const ef: string[] = j.snapshot.meta.edge_fields;
  const edgeTypes: string[] = j.snapshot.meta.edge_types[0];
  const out: Tally = new Map();
  let edge = 0;
  for (let i = 0; i < j.nodes.length; i += f.length) {
    const type = types[j.nodes[i + ti!]]!;
    let name = String(j.strings[j.nodes[i + ni!]] ?? '');
    // Scopes and plain objects are told apart by what they hold: a scope's variable names, an object's keys.
    const names: string[] = [];
    for (let e = 0; e < j.nodes[i + ei!]; e++, edge += ef.length) {
      const et = edgeTypes[j.edges[edge]];
      if (et === 'context' || (et === 'property' && (name === 'Object' || name.endsWith('LexicalEnvironment')))) names.push(String(j.strings[j.edges[edge + 1]]));
    }
    if (names.length && process.env.DETAIL) name += ` {${names.slice(0, 12).join(',')}}`;
    if (type === 'string' || type === 'concatenated string' || type === 'sliced string') name = '';
    const k = `${type} ${name.slice(0, 160)}`;
    const t = out.get(k) ?? { count: 0, bytes: 0 };
    t.count++;
    t.bytes += j.nodes[i + si!];
    out.set(k, t);
  }
  return out;
}

const [a, b, n] = process.argv.slice(2);
const before = tally(a!);
const after = tally(b!);
const per = Number(n ?? 1);
const rows = [...after].map(([k, v]) => ({ k, count: v.count - (before.get(k)?.count ?? 0), bytes: v.bytes - (before.get(k)?.bytes ?? 0) }))
  .filter((r) => r.count > 0 || r.bytes > 0).sort((x, y) => y.bytes - x.bytes);
const total = rows.reduce((s, r) => s + r.bytes, 0);
console.log(`gained ${(total / 1024).toFixed(0)} kB${n ? `, ${(total / per).toFixed(0)} B per stream` : ''}`);
for (const r of rows.slice(0, Number(process.env.TOP ?? 60))) {
  console.log(`${(r.bytes / per).toFixed(0).padStart(7)} B ${(r.count / per).toFixed(2).padStart(6)}x  ${r.k}`);
}
