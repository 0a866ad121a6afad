/** Process entry: load configuration, build services, listen. Nothing else lives here. */
import { ConfigError, loadConfig } from '@gw/config';
import { createServices } from './services';
import { listen } from './app';
import { setTrustProxy } from './plugins/client-ip';

try {
  const config = loadConfig();
  setTrustProxy(config.env.TRUST_PROXY === 'true' || config.env.TRUST_PROXY === '1');
  const services = await createServices(config);
  const app = listen(services);
  console.log(`AI gateway listening on http://${config.host}:${app.server!.port} (database ${config.databaseUrl})`);
  const shutdown = async () => {
    // Open WebSockets would keep a graceful stop waiting: end realtime sessions (1001) first.
    services.realtime.closeAll();
    await app.stop();
    await services.close();
    process.exit(0);
  };
  process.on('SIGINT', shutdown);
  process.on('SIGTERM', shutdown);
} catch (e) {
  if (e instanceof ConfigError) {
    console.error(`Configuration error: ${e.message}`);
    process.exit(1);
  }
  throw e;
}
