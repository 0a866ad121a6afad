/** Process entry: load configuration, build services, listen. Nothing else lives here. */
// First: it may re-execute the process with Bun's fetch limit sized to the upstream cap.
import './fetch-limit';
import { ConfigError, loadConfig, redactUrl } from '@gw/config';
import { createLogger } from '@gw/core/log';
import { superviseWorkers } from './supervisor';
import { checkListenHost, urlHost } from './listen-host';

// Everything this process creates (data folder, database, WAL, journal, keys) is its user's alone;
// the libraries also set these modes explicitly, this covers whatever else SQLite or Bun may create.
process.umask(0o077);

try {
  const config = loadConfig();
  await checkListenHost(config.host);
  if (config.workers > 1) {
    // PORT=0 would give each worker a port of its own: the workers must share one.
    if (config.port === 0) throw new ConfigError('WORKERS > 1 needs a fixed PORT (with PORT=0 every worker would listen on a different port)');
    // WORKERS=N (PostgreSQL only, checked by the config): N single-worker copies of this entry share the port.
    // The supervisor serves nothing: it never loads the server (about 30 MB less resident, measured).
    const log = createLogger({ level: config.logLevel, format: config.logFormat });
    log.info('workers.start', { workers: config.workers, database: redactUrl(config.databaseUrl), port: config.port });
    process.exit(await superviseWorkers({ workers: config.workers, log }));
  }
  const [{ createServices, loggerFor }, { listen }, { setTrustProxy }, { bunFetchLimit, openFileLimit }, { guardProcess }] = await Promise.all([
    import('./services'), import('./app'), import('./plugins/client-ip'), import('@gw/core'), import('./crash-guard'),
  ]);
  setTrustProxy(config.trustProxyHops || config.trustProxy);
  const log = loggerFor(config);
  // The default changed from the leftmost entry (which a client behind an appending proxy writes) to the rightmost:
  // said once, so a deployment behind several appending proxies sees why every client now has its inner proxy's address.
  if (config.trustProxy && process.env.TRUST_PROXY_HOPS === undefined) {
    log.info('trust_proxy.rightmost', { msg: 'TRUST_PROXY_HOPS unset: the client address is the rightmost X-Forwarded-For entry; behind several proxies that append, set TRUST_PROXY_HOPS to their number' });
  }
  const services = await createServices(config, log);
  // From here on a stray throw is logged and counted instead of ending every user's streams (crash-guard.ts).
  guardProcess(log, services.metrics.uncaught);
  const app = listen(services);
  let stopping = false;
  const shutdown = async () => {
    // A supervisor (or `bun run`, which forwards signals) may signal twice: stop once.
    if (stopping) return;
    stopping = true;
    let code = 0;
    try {
      // Open WebSockets would keep a graceful stop waiting: end realtime sessions (1001) first.
      const recorded = services.realtime.closeAll();
      await app.stop();
      await recorded;
      await services.close();
    } catch (err) {
      // A stop that fails (a full disk under the last flush) still ends the process: with the crash guard its
      // rejection would only be logged, and a process that no longer listens would ignore every later signal.
      log.error('shutdown.failed', { msg: 'the process exits without finishing its graceful stop' }, err);
      code = 1;
    } finally {
      process.exit(code);
    }
  };
  process.on('SIGINT', shutdown);
  process.on('SIGTERM', shutdown);
  // Announced only once the stop handlers are in place: a supervisor that sends SIGTERM as soon as it
  // sees this line gets a graceful stop, not the default kill.
  log.info('listening', { url: `${config.tls ? 'https' : 'http'}://${urlHost(config.host)}:${app.server!.port}`, database: redactUrl(config.databaseUrl),
    max_upstream_connections: services.relay.slots.max, open_files: openFileLimit() ?? 'unknown', fetch_slots: bunFetchLimit() });
} catch (e) {
  // Start-up failures are one line an operator can act on, not a stack trace.
  process.stderr.write((e instanceof ConfigError ? `Configuration error: ${e.message}` : `Start-up failed: ${(e as Error)?.message ?? e}`) + '\n');
  process.exit(1);
}
