/**
 * Reachability probes clients send before their first real request, answered without credentials:
 * `HEAD /` (generic "is the base URL up") and `/api/hello` (Claude Code's pre-connect, sent as HEAD at
 * start-up and by sub-agents). HEAD gets the GET answer's status and headers and no body (Bun).
 * `HEAD /v1/messages` is not here: it answers 405 with `Allow: POST` like any other method but POST.
 */
import { Elysia } from 'elysia';

const ok = () => ({ status: 'ok' });
const detail = (summary: string) => ({ detail: { tags: ['system'], summary, description: `${summary}. Answers 200 with an empty body to HEAD and {"status":"ok"} to GET; needs no credentials and reads no body.`, responses: { 200: { description: '{"status":"ok"}' } } } });

export const probeRoutes = new Elysia({ name: 'probe-routes' })
  .get('/', ok, detail('Reachability probe of the base URL (HEAD or GET, no credentials)'))
  .get('/api/hello', ok, detail("Claude Code's pre-connect probe (HEAD or GET, no credentials)"));
