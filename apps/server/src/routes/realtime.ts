/**
 * GET /v1/realtime: the WebSocket relay. A plain `.get()` route that upgrades with Bun's own
 * `server.upgrade` (app.ws would re-serialise JSON frames: big numbers lose digits). Elysia's Bun server
 * dispatches websocket events to `ws.data.open/message/drain/close`, so the handlers of each
 * session travel in the upgrade's `data` and frames reach them untouched.
 */
import { Elysia } from 'elysia';
import { GatewayError, errorResponse, toGatewayError, type Logger } from '@gw/core';
import type { Admission } from '@gw/realtime';
import { keyRevoked } from '@gw/relay';
import { clientIp } from '../plugins/client-ip';
import { logFailure, requestIdOf } from '../plugins/http-errors';
import type { Services } from '../services';

/** What the route needs from the realtime service (Services.realtime). */
export interface RealtimeAdmitter {
  /** A promise when the quota's trial reservation answers later (PostgreSQL). */
  admit(request: Request, ip: string): Admission | Promise<Admission>;
}

/**
 * `limit` (optional) runs the per key/user/group request limits on an admitted session before the upgrade;
 * a refusal gives the session slot back and answers its 429.
 */
export const realtimeRoutes = (realtime: RealtimeAdmitter, log: Logger, limit?: (a: Admission, ip: string) => Promise<void>) =>
  new Elysia({ name: 'realtime' })
    .get('/v1/realtime', async ({ request, server }) => {
      const requestId = requestIdOf(request);
      let admission: Admission | undefined;
      try {
        const ip = clientIp(request, server);
        admission = await realtime.admit(request, ip);
        await limit?.(admission, ip);
      } catch (e) {
        admission?.abandon();
        const err = toGatewayError(e);
        logFailure(log, request, err, e);
        return errorResponse(err, 'v1', requestId);
      }
      const headers: Record<string, string> = { 'request-id': requestId, 'realtime-session-id': admission.sessionId };
      // Bun answers with the first offered protocol unless told otherwise: that could be the key.
      if (admission.protocol) headers['sec-websocket-protocol'] = admission.protocol;
      if (server?.upgrade(request, { headers, data: admission.handlers })) return;
      admission.abandon();
      return errorResponse(new GatewayError(400, 'websocket_upgrade_failed', 'The WebSocket upgrade failed', { param: 'upgrade' }), 'v1', requestId);
    }, { detail: { tags: ['realtime'], summary: 'Realtime session (WebSocket)', description: 'Upgrades to a WebSocket relayed byte for byte to an OpenAI-Realtime-compatible upstream; each response is metered. The key comes from `Authorization: Bearer` or the subprotocol `openai-insecure-api-key.<key>`. Failures before the upgrade are JSON errors.' } });

/**
 * The request limits of a session's opening (requests per minute of its key, user and group; a session is
 * one request). Its tokens are metered per response, and its concurrency by REALTIME_MAX_SESSIONS_PER_KEY.
 */
export async function limitRealtime(s: Services, a: Admission, ip: string): Promise<void> {
  // Read again: the admission may have awaited the shared store, and a key deleted or disabled (or its owner)
  // meanwhile must not open a session, nor skip the limits (which it did when the key was no longer indexed).
  const key = s.apiKeys.byId(a.subject.keyId);
  if (!key) throw keyRevoked();
  const { user } = s.relay.gate.authorize(key, a.subject.model, ip);
  await s.relay.limiter.admit({ key, user, group: s.relay.relay.policy(a.subject.group) }, { tokens: 0, hold: false, model: a.subject.model });
}
