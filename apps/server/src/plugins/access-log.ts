/**
 * One `http.request` log line per request when LOG_REQUESTS is on: request id, method, path, status,
 * duration. Never headers, bodies or query strings (keys and tokens travel there).
 */
import { Elysia } from 'elysia';
import type { Logger } from '@gw/core';
import { requestIdOf, startedAtOf } from './http-errors';

export const accessLog = (enabled: boolean, log: Logger) => {
  const plugin = new Elysia({ name: 'access-log' });
  if (!enabled) return plugin;
  return plugin
    .onAfterResponse({ as: 'global' }, ({ request, set }) => {
      const t0 = startedAtOf(request);
      const path = request.url.replace(/^[a-z]+:\/\/[^/]+/i, '').replace(/\?.*$/, '');
      log.info('http.request', {
        id: requestIdOf(request), method: request.method, path, status: Number(set.status ?? 200),
        ms: t0 === undefined ? undefined : Number((performance.now() - t0).toFixed(1)),
      });
    });
};
