/**
 * Compact terminal charts: one row of block characters per series, scaled from 0 to the series' maximum,
 * so a day with nothing stays a blank baseline and the tallest bar is the busiest bucket.
 */
const BLOCKS = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/** One block per value: a blank for 0, else one of eight heights relative to the maximum. */
export function sparkline(values: number[]): string {
  const max = Math.max(0, ...values);
  return values.map((v) => (v <= 0 || max === 0 ? ' ' : BLOCKS[Math.min(7, Math.ceil((v / max) * 8) - 1)]!)).join('');
}

/** Sums adjacent values so at most `width` remain (a month of hours still fits a terminal line). */
export function fit(values: number[], width: number): { values: number[]; per: number } {
  const per = Math.max(1, Math.ceil(values.length / Math.max(1, width)));
  const out: number[] = [];
  for (let i = 0; i < values.length; i += per) out.push(values.slice(i, i + per).reduce((a, b) => a + b, 0));
  return { values: out, per };
}

/** Labelled sparklines with their maximum, e.g. `requests ▁▃█▂  max 1200`. */
export function chart(series: { label: string; values: number[] }[], width = 100): string {
  const w = Math.max(...series.map((s) => s.label.length));
  return series.map((s) => {
    const f = fit(s.values, width);
    return `${s.label.padEnd(w)}  ${sparkline(f.values)}  max ${Math.max(0, ...f.values)}`;
  }).join('\n') + '\n';
}
