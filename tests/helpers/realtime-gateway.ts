import { expect } from 'bun:test';
import { startGateway, type TestGateway } from './gateway';
import { startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';

/** A gateway (REALTIME_* from `env`) with one realtime channel to a fresh upstream double, and `price` set for its model. */
export async function startRealtimeGateway(env: Record<string, string>, price: Record<string, unknown>): Promise<{ gw: TestGateway; up: RealtimeUpstreamDouble }> {
  const up = startRealtimeUpstream();
  const gw = await startGateway({ REALTIME_DEFAULT_MODEL: 'gpt-realtime', ...env });
  expect((await gw.api('POST', '/api/channel/', { name: 'rt', type: 'openai', base_url: up.url, key: 'upstream-secret', timeout_ms: 5000, models: ['gpt-realtime'] })).status).toBe(200);
  expect((await gw.api('PUT', '/api/pricing/', price)).status).toBe(200);
  return { gw, up };
}
