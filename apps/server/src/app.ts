/**
 * Builds the HTTP application from services without listening, so tests and the benchmark can
 * start it on any port. Feature route modules are mounted here and nowhere else.
 */
import { Elysia } from 'elysia';
import './plugins/strict-integers';
import type { Services } from './services';
import { httpErrors } from './plugins/http-errors';
import { accessLog } from './plugins/access-log';
import { frontDoor } from './plugins/front-door';
import { RouteTable } from './plugins/route-table';
import { quietValidation } from './plugins/quiet-validation';
import { bodyShape } from './plugins/body-shape';
import { nulText } from './plugins/nul-text';
import { originOf } from './plugins/same-origin';
import { managementAuthError, usesSessionCookie } from './plugins/auth';
import { relayKeyOf } from './plugins/relay-key';
import { GatewayError } from '@gw/core';
import { topupRoutes } from './routes/topup';
import { webhookRoutes } from './routes/webhooks';
import { ledgerRoutes } from './routes/ledger';
import { redeemRoutes } from './routes/redeem';
import { sessionRoutes } from './routes/session';
import { channelRoutes } from './routes/channels';
import { channelKeyRoutes } from './routes/channel-keys';
import { userRoutes } from './routes/users';
import { tokenRoutes } from './routes/tokens';
import { openapiPlugin } from './plugins/openapi';
import { twoFactorRoutes } from './routes/two-factor';
import { passwordRoutes } from './routes/password';
import { messagesRoutes } from './routes/messages';
import { pricingRoutes } from './routes/pricing';
import { groupRoutes } from './routes/groups';
import { budgetRoutes } from './routes/budgets';
import { logRoutes } from './routes/logs';
import { limitRealtime, realtimeRoutes } from './routes/realtime';
import { metricsRoutes } from './routes/metrics';
import { probeRoutes } from './routes/probes';

/** The 401 of a request lacking the credentials of its route's kind (checked before its body is read). */
function authenticator(s: Services) {
  return (request: Request, kind: 'relay' | 'management'): GatewayError | null | Promise<GatewayError | null> => {
    if (kind === 'management') return managementAuthError(s, request);
    try {
      relayKeyOf(s, request);
      return null;
    } catch (e) {
      if (e instanceof GatewayError) return e;
      throw e;
    }
  };
}

export function createApp(s: Services) {
  // Built on the first request, when every plugin has registered its routes.
  let table: RouteTable | null = null;
  const routeTable = () => {
    if (!table) {
      quietValidation(app.routes as any);
      table = new RouteTable(app.routes);
    }
    return table;
  };
  const c = s.config;
  const app: Elysia<any, any, any, any, any, any, any> = new Elysia({ name: 'gateway' })
    .use(httpErrors({ table: routeTable, log: s.log }))
    .use(frontDoor({
      table: routeTable, maxBodyBytes: c.maxBodyBytes, anonMaxBodyBytes: c.anonMaxBodyBytes, jsonMaxDepth: c.jsonMaxDepth,
      bodyTimeoutMs: c.bodyTimeoutMs, publicOrigin: originOf(c.env.PUBLIC_URL?.trim() || `http://localhost:${c.port}`),
      authenticate: authenticator(s), usesSessionCookie,
    }))
    .use(bodyShape(() => app.routes as any))
    .use(nulText())
    .use(accessLog(s.config.logRequests, s.log))
    .use(metricsRoutes(s))
    // Metering writes are batched (BILLING_FLUSH_MS); the management API reads the database, so it
    // writes what is queued first: a user who just made a request sees it in logs, ledger and balance.
    .onRequest(({ request }) => {
      if (request.url.includes('/api/')) s.relay.quota.flush();
    })
    .get('/health', () => ({ status: 'ok' }), { detail: { tags: ['system'], summary: 'Liveness probe', description: 'Answers 200 `{"status":"ok"}` while the process serves requests. Needs no credentials.' } })
    .use(probeRoutes)
    .use(openapiPlugin({ title: 'AI Gateway', version: '0.1.0' }))
    .use(sessionRoutes(s))
    .use(channelRoutes(s))
    .use(channelKeyRoutes(s))
    .use(userRoutes(s))
    .use(tokenRoutes(s))
    .use(topupRoutes(s))
    .use(webhookRoutes(s))
    .use(ledgerRoutes(s))
    .use(redeemRoutes(s))
    .use(twoFactorRoutes(s))
    .use(passwordRoutes(s))
    .use(messagesRoutes(s))
    .use(pricingRoutes(s))
    .use(groupRoutes(s))
    .use(budgetRoutes(s))
    .use(logRoutes(s))
    .use(realtimeRoutes(s.realtime, s.log, (a, ip) => limitRealtime(s, a, ip)));
  return app;
}

/**
 * Starts the app on `port` (0 = any free port) with the server options the gateway needs.
 * Binds exclusively unless LISTEN_REUSE_PORT is on (Elysia's default is port reuse, with which a second
 * process on a busy port starts silently and the kernel splits connections between the two).
 * A busy port, or a HOST that is no address of this machine, throws one line naming it.
 */
export function listen(s: Services, port = s.config.port, hostname = s.config.host) {
  const app = createApp(s);
  try {
    bind(app, s, port, hostname);
  } catch (e) {
    if ((e as NodeJS.ErrnoException)?.code === 'EADDRINUSE') throw new Error(`port ${port} on ${hostname} is already in use`, { cause: e });
    // Bun's message (`EADDRNOTAVAIL: address not available, listen`) names neither; the cause keeps its code and stack.
    throw new Error(`cannot listen on ${hostname} port ${port}: ${(e as Error)?.message ?? e}`, { cause: e });
  }
  return app;
}

function bind(app: ReturnType<typeof createApp>, s: Services, port: number, hostname: string) {
  app.listen({
    port, hostname,
    reusePort: s.config.reusePort,
    idleTimeout: s.config.idleTimeoutSeconds,
    // Bun would answer an oversized body with plain text; http-errors enforces MAX_BODY_BYTES with a JSON 413
    // (content-length up front, chunked bodies while reading), so Bun's own limit is set out of the way.
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    // The only WebSocket is /v1/realtime: a client message past its largest frame is closed 1009 by Bun, unread.
    // Bun pings a client shortly before its idleTimeout: one that answers stays however quiet, one that is gone (or
    // reads nothing, so never sees the ping) is closed, its session ending as the client's close.
    websocket: { maxPayloadLength: s.realtime.maxFrameBytes, idleTimeout: s.realtime.idleTimeoutSeconds, sendPings: true },
    // HTTPS and WSS on the same port (realtime SDKs always connect with wss://).
    ...(s.config.tls ? { tls: s.config.tls } : {}),
  });
}
