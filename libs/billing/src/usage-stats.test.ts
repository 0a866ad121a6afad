import { describe, expect, test } from 'bun:test';
import { Database } from 'bun:sqlite';
import type { StatsReader, StatsRow } from '@gw/db';
import { STATS_LIMITS, UsageStatsService, binValue, percentileOf } from './usage-stats';
import { csvField } from './usage-export';

/** The bin SQLite computes for a latency (the same expression the repository uses). */
const db = new Database(':memory:');
const binOf = (ms: number) => (db.query('select case when ?1 < 1 then 0 else cast(log2(?1) * 8 as integer) + 1 end b').get(ms) as { b: number }).b;

describe('latency percentiles from the log-scale histogram', () => {
  test('every latency from 0 ms to 10 minutes reads back within 4.5% + 1 ms', () => {
    let worst = 0;
    let beyond = 0;
    for (let ms = 0; ms <= 600_000; ms += ms < 2000 ? 1 : 97) {
      const v = binValue(binOf(ms));
      if (ms === 0) expect(v).toBe(0);
      else worst = Math.max(worst, Math.abs(v - ms) / ms);
      if (Math.abs(v - ms) > 1 + 0.045 * ms) beyond++;
    }
    expect(beyond).toBe(0);
    expect(worst).toBeGreaterThan(0.01); // the bins are really coarser than exact
  });

  test('nearest-rank over the histogram matches the exact percentile within 4.5%', () => {
    let s = 7;
    const rnd = () => ((s = (s * 1103515245 + 12345) % 2147483648) / 2147483648);
    for (let round = 0; round < 20; round++) {
      const values = Array.from({ length: 1 + Math.floor(rnd() * 3000) }, () => Math.floor(50 * Math.exp(rnd() * 7)));
      const hist = new Map<number, number>();
      for (const v of values) hist.set(binOf(v), (hist.get(binOf(v)) ?? 0) + 1);
      const bins = [...hist].map(([bin, n]) => ({ bin, n }));
      const sorted = [...values].sort((a, b) => a - b);
      for (const p of [0.5, 0.99]) {
        const exact = sorted[Math.ceil(p * sorted.length) - 1]!;
        expect(Math.abs(percentileOf(bins, p) - exact)).toBeLessThanOrEqual(1 + 0.045 * exact);
      }
    }
    expect(percentileOf([], 0.5)).toBe(0);
  });
});

describe('CSV fields', () => {
  test('RFC 4180 quoting and formula defusing', () => {
    expect(csvField('plain')).toBe('plain');
    expect(csvField('a,b')).toBe('"a,b"');
    expect(csvField('say "hi"')).toBe('"say ""hi"""');
    expect(csvField('x\ny')).toBe('"x\ny"');
    expect(csvField('=1+1')).toBe("'=1+1");
    expect(csvField('=A1,B1')).toBe(`"'=A1,B1"`);
    // Other openings a spreadsheet may read as a formula, and a locale's semicolon separator.
    expect(csvField('\0=1+1')).toBe("'\0=1+1");
    expect(csvField('\n=1+1')).toBe(`"'\n=1+1"`);
    expect(csvField('x;=1+1')).toBe('"x;=1+1"');
    expect(csvField('x\t=1+1')).toBe('"x\t=1+1"');
    expect(csvField(-5)).toBe('-5');
    expect(csvField(null)).toBe('');
    expect(csvField(true)).toBe('true');
  });
});

describe('statistics by key over too many rows', () => {
  test('are refused before any key is looked up: the owners of deleted keys are reads, and the answer is a 400 anyway', async () => {
    const rows: StatsRow[] = Array.from({ length: STATS_LIMITS.maxRows + 1 }, (_, i) => ({
      bucket: 0, grp: i + 1, requests: 1, errors: 0, inputTokens: 0n, outputTokens: 0n, cacheReadTokens: 0n, cacheWriteTokens: 0n, audioTokens: 0n, cost: 0n,
    }));
    const reader: StatsReader = { read: async () => ({ rows, hist: [] }), close: async () => {} };
    let asked = 0;
    const stats = new UsageStatsService(reader, () => 1_000_000);
    const r = await stats.stats({ group_by: 'key' }, undefined, async (ids) => { asked += ids.length; return new Set(); }).catch((e: unknown) => e);
    expect((r as { code?: string }).code).toBe('too_many_rows');
    expect(asked).toBe(0);
  });
});
