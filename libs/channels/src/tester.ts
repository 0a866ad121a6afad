import { GatewayError, nowSeconds, readBounded } from '@gw/core';
import { getAdapter, scrubberFor } from '@gw/providers';
import { usableKey } from './keys';
import type { ChannelRegistry } from './registry';
import { probeRequest } from './override-program';
import type { ChannelTestResult } from './schemas';
import type { ChannelService } from './service';

const TEST_BODY_BYTES = 4 * 1024 * 1024;

export interface ChannelTesterOptions {
  /** Upper bound of a test call, whatever the channel's own timeout (ms). */
  maxTimeoutMs?: number;
  fetch?: typeof fetch;
  /**
   * The relay's upstream slots (MAX_UPSTREAM_CONNECTIONS and its per-user share): a test is an outbound upstream call
   * like a relayed request, so it takes one for its call (throwing the same 503 or 429 when none is free). Without it
   * an admin looping tests held upstream connections past the cap.
   */
  slots?: { acquire(userId?: number): () => void };
}

/** 409, not a test: every key of the channel is disabled, and a test must not send one an operator took out of use. */
const noEnabledKey = (id: number) => new GatewayError(409, 'no_enabled_channel_key',
  `Channel ${id} has no enabled key to test with; enable one of its keys first`, { param: 'id' });

/**
 * "Test channel": one minimal real Messages request (max_tokens 1) through the channel's adapter, with its first
 * enabled key (never an operator-disabled or auto-disabled one: there is no way to name a key, so a test that fell
 * back to a disabled key sent a key an operator took out of use). Records the response time and when; never changes
 * the status, so a manually disabled channel stays disabled and an auto-disabled one is left to the health prober.
 */
export class ChannelTester {
  private readonly fetchFn: typeof fetch;

  constructor(private readonly registry: ChannelRegistry, private readonly service: ChannelService, private readonly opts: ChannelTesterOptions = {}) {
    this.fetchFn = opts.fetch ?? fetch;
  }

  /** `by`: the operator's user id, counted against MAX_UPSTREAM_CONNECTIONS_PER_USER like a relayed request's user. */
  async test(id: number, model?: string, by?: number): Promise<ChannelTestResult> {
    const ch = this.registry.get(id);
    if (!ch) {
      await this.service.get(id); // 404 when the channel does not exist at all
      throw new GatewayError(400, 'channel_key_unreadable', 'The channel key cannot be decrypted with the configured SECRET_KEY; set the key again', { param: 'key' });
    }
    const requested = model ?? ch.models[0]!;
    if (!ch.models.includes(requested)) throw new GatewayError(400, 'model_not_served', `Channel ${id} does not serve model "${requested}"`, { param: 'model' });
    const key = ch.keys.find(usableKey);
    if (!key) throw noEnabledKey(id);
    const adapter = getAdapter(ch.type);
    const probe = probeRequest(ch, requested);
    const target = { baseUrl: ch.baseUrl, apiKey: key.apiKey, upstreamModel: ch.modelMapping[requested] ?? requested, extraHeaders: probe.extraHeaders, timeoutMs: ch.timeoutMs };
    const req = adapter.buildMessagesRequest(probe.body as Parameters<typeof adapter.buildMessagesRequest>[0], target, new Headers());
    // The same scrubber as the relay's: the upstream's text never shows any key of this channel (not only the one
    // sent: an admin never sees the others either) or its header secrets (also those an override removed or replaced).
    const scrubber = scrubberFor({ ...target, channelHeaders: ch.headers, keys: ch.keys.map((k) => k.apiKey) });
    // Taken before the call and held until its answer is read; none free: the relay's own 503 (or the share's 429).
    const release = this.opts.slots?.acquire(by);
    const started = performance.now();
    let status = 0;
    let success = false;
    let message = '';
    try {
      const res = await this.fetchFn(req.url, { ...req.init, signal: AbortSignal.timeout(Math.min(ch.timeoutMs, this.opts.maxTimeoutMs ?? 30_000)) });
      status = res.status;
      // Bounded like the relay's reads: a test answer larger than a real reply is not buffered whole.
      const read = await readBounded(res.body, { limit: TEST_BODY_BYTES, deadline: Infinity });
      const text = read.ok ? Buffer.from(read.bytes).toString('utf8') : '';
      if (res.ok) {
        adapter.decodeMessagesResponse(JSON.parse(text), { requestedModel: requested });
        success = true;
      } else {
        message = scrubber.scrub(adapter.classifyError(res.status, text, res.headers, scrubber).error.message);
      }
    } catch (e) {
      // The upstream's raw error can carry its URL; keep only the kind of failure.
      message = e instanceof GatewayError ? scrubber.scrub(e.message) : (e as Error)?.name === 'TimeoutError' ? 'upstream timed out' : 'upstream unreachable or answered garbage';
    } finally {
      release?.();
    }
    const ms = Math.round(performance.now() - started);
    const at = nowSeconds();
    await this.service.recordTest(id, ms, at);
    return { success, response_time_ms: ms, status, message, tested_at: at };
  }
}
