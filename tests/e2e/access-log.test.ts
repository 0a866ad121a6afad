import { afterEach, expect, spyOn, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway | undefined;
afterEach(async () => { await gw?.stop(); gw = undefined; });

test('LOG_REQUESTS=true writes one line per request with id, status and duration, never secrets', async () => {
  gw = await startGateway({ LOG_REQUESTS: 'true' });
  const spy = spyOn(console, 'log').mockImplementation(() => {});
  try {
    const r = await gw.api('GET', '/api/user/self?token=gwm_secret_in_query', undefined, 'gwm_not_a_real_token');
    expect(r.status).toBe(401);
    await Bun.sleep(20);
    const lines = spy.mock.calls.map((c) => String(c[0]));
    const line = lines.find((l) => l.includes(r.headers.get('request-id')!));
    expect(line).toMatch(/ GET \/api\/user\/self 401 \d+\.\dms$/);
    expect(lines.join('\n')).not.toContain('gwm_');
  } finally {
    spy.mockRestore();
  }
});

test('request logging is off by default', async () => {
  gw = await startGateway();
  const spy = spyOn(console, 'log').mockImplementation(() => {});
  try {
    await gw.api('GET', '/health', undefined, null);
    await Bun.sleep(20);
    expect(spy.mock.calls.filter((c) => String(c[0]).includes('/health'))).toHaveLength(0);
  } finally {
    spy.mockRestore();
  }
});
