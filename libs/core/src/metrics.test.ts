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

test('remembered series keys: the same labels in another type or order are their own exact series, names are part of the key', () => {
  const c = new MetricsRegistry().counter('y_total', 'Y');
  c.inc({ status: 200, route: '/a' });
  c.inc({ status: '200', route: '/a' });
  c.inc({ route: '/a', status: 200 });
  c.inc({ status: 200, path: '/a' });
  c.inc({ status: 500, route: '/a' }, 4);
  expect(c.get({ status: 200, route: '/a' })).toBe(2);
  expect(c.get({ route: '/a', status: '200' })).toBe(1);
  expect(c.get({ status: 200, path: '/a' })).toBe(1);
  expect(c.get({ status: 500, route: '/a' })).toBe(4);
  expect(c.get({ status: 200 })).toBe(0);
  expect(c.render().split('\n').slice(2).sort()).toEqual(['y_total{route="/a",status="200"} 1', 'y_total{status="200",path="/a"} 1', 'y_total{status="200",route="/a"} 2', 'y_total{status="500",route="/a"} 4']);
});
