import { afterEach, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway | undefined;
afterEach(async () => { await gw?.stop(); gw = undefined; });

test('LOG_REQUESTS=true writes one line per request with id, status and duration, never secrets', async () => {
  gw = await startGateway({ LOG_REQUESTS: 'true' });
  const r = await gw.api('GET', '/api/user/self?token=gwm_secret_in_query', undefined, 'gwm_not_a_real_token');
  expect(r.status).toBe(401);
  await Bun.sleep(20);
  const line = gw.logs.find((l) => l.includes(' http.request ') && l.includes(r.headers.get('request-id')!));
  expect(line).toMatch(/^\S+Z info http\.request id=\S+ method=GET path=\/api\/user\/self status=401 ms=\d+(\.\d)?$/);
  expect(gw.logs.join('\n')).not.toContain('gwm_');
});

test('request logging is off by default', async () => {
  gw = await startGateway();
  await gw.api('GET', '/health', undefined, null);
  await Bun.sleep(20);
  expect(gw.logs.filter((l) => l.includes('/health'))).toHaveLength(0);
});
