/**
 * One line per request on stdout when LOG_REQUESTS is on: time, request id, method, path, status,
 * duration. Never headers, bodies or query strings (keys and tokens travel there).
 */
import { Elysia } from 'elysia';
import { requestIdOf, startedAtOf } from './http-errors';

export const accessLog = (enabled: boolean, write: (line: string) => void = (line) => console.log(line)) => {
  const plugin = new Elysia({ name: 'access-log' });
  if (!enabled) return plugin;
  return plugin
    .onAfterResponse({ as: 'global' }, ({ request, set }) => {
      const t0 = startedAtOf(request);
      const ms = t0 === undefined ? '-' : (performance.now() - t0).toFixed(1);
      const path = request.url.replace(/^[a-z]+:\/\/[^/]+/i, '').replace(/\?.*$/, '');
      write(`${new Date().toISOString()} ${requestIdOf(request)} ${request.method} ${path} ${set.status ?? 200} ${ms}ms`);
    });
};
