import { expect, test } from 'bun:test';
import { chart, fit, sparkline } from './sparkline';

test('sparkline scales from zero to the maximum; zero is blank', () => {
  expect(sparkline([0, 1, 2, 4, 8])).toBe(' ▁▂▄█');
  expect(sparkline([0, 0])).toBe('  ');
  expect(sparkline([])).toBe('');
});

test('fit sums neighbours so a month of hours fits the width', () => {
  const f = fit(Array.from({ length: 744 }, () => 1), 100);
  expect(f.per).toBe(8);
  expect(f.values).toHaveLength(93);
  expect(f.values.reduce((a, b) => a + b, 0)).toBe(744);
  expect(chart([{ label: 'requests', values: [1, 0, 3] }, { label: 'cost', values: [0, 0, 0] }])).toBe('requests  ▃ █  max 3\n' + 'cost    ' + '  ' + '   ' + '  max 0\n');
});
