import { expect, test } from 'bun:test';
import { MetricsRegistry } from './metrics';

test('counters, cumulative histogram buckets and gauges in Prometheus text format, labels escaped', () => {
  const r = new MetricsRegistry();
  const c = r.counter('x_total', 'Things');
  c.inc({ a: 'q"u\\o\nte' });
  c.inc({ a: 'q"u\\o\nte' }, 2);
  const h = r.histogram('d_seconds', 'Durations', [0.1, 1]);
  h.observe({ r: '/a' }, 0.05);
  h.observe({ r: '/a' }, 0.5);
  h.observe({ r: '/a' }, 5);
  r.gauge('g', 'Gauge', () => [[{ k: 1 }, 7]]);
  expect(r.render()).toBe([
    '# HELP x_total Things', '# TYPE x_total counter', 'x_total{a="q\\"u\\\\o\\nte"} 3',
    '# HELP d_seconds Durations', '# TYPE d_seconds histogram',
    'd_seconds_bucket{r="/a",le="0.1"} 1', 'd_seconds_bucket{r="/a",le="1"} 2', 'd_seconds_bucket{r="/a",le="+Inf"} 3',
    'd_seconds_sum{r="/a"} 5.55', 'd_seconds_count{r="/a"} 3',
    '# HELP g Gauge', '# TYPE g gauge', 'g{k="1"} 7', '',
  ].join('\n'));
  expect(c.get({ a: 'q"u\\o\nte' })).toBe(3);
});
