/**
 * GET /metrics: Prometheus text format, for admins (a scraper sends `Authorization: Bearer gwm_…`).
 * HTTP counters are fed by an after-response hook on every route.
 */
import { Elysia } from 'elysia';
import { authPlugin } from '../plugins/auth';
import { startedAtOf } from '../plugins/http-errors';
import type { Services } from '../services';

export const metricsRoutes = (s: Services) =>
  new Elysia({ name: 'metrics-routes' })
    .use(authPlugin(s))
    .onAfterResponse({ as: 'global' }, ({ request, set, route }: { request: Request; set: { status?: number | string }; route?: string }) => {
      const t0 = startedAtOf(request);
      // Unmatched paths share one label: raw paths would let any caller grow the series without bound.
      const r = route ?? 'unmatched';
      s.metrics.http.inc({ method: request.method, route: r, status: set.status ?? 200 });
      if (t0 !== undefined) s.metrics.httpSeconds.observe({ route: r }, (performance.now() - t0) / 1000);
    })
    .get('/metrics', () => new Response(s.metrics.registry.render(), { headers: { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' } }), {
      role: 'admin',
      detail: { tags: ['system'], summary: 'Prometheus metrics', description: 'Prometheus text (admin): HTTP requests and durations per route, upstream attempts per channel, tokens and quota by model, channel status, settlement queue and live realtime sessions.' },
    });
