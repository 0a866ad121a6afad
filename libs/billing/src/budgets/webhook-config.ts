import { ConfigError, readIntEnv } from '@gw/config';

/** Where and how alerts are delivered (read once at start-up; a bad value stops it). */
export interface AlertWebhookConfig {
  /** ALERT_WEBHOOK_URL: http(s) URL that receives each alert as a signed POST; null = alerts are only logged and recorded. */
  url: string | null;
  /** ALERT_WEBHOOK_SECRET: HMAC-SHA256 key of the `x-gateway-signature` header (≥ 16 characters; required with the URL). */
  secret: string;
  /** ALERT_WEBHOOK_TIMEOUT_MS: one delivery attempt's deadline. */
  timeoutMs: number;
  /** ALERT_WEBHOOK_MAX_ATTEMPTS: attempts before an alert is marked failed (and logged as such). */
  maxAttempts: number;
  /** ALERT_WEBHOOK_RETRY_MS: delay before the 2nd attempt; doubled each time, at most ALERT_WEBHOOK_RETRY_MAX_MS. */
  retryMs: number;
  retryMaxMs: number;
  /** How often the worker looks for due alerts besides being woken by new ones (retries, leftovers of a crash). */
  pollMs: number;
  /** ALERT_OUTBOX_RETENTION_DAYS: days delivered and skipped alerts stay in the outbox (0: forever). */
  retentionDays: number;
  /** ALERT_OUTBOX_PRUNE_MS: how often the leader prunes them. */
  pruneMs: number;
}

export function alertWebhookConfig(env: Record<string, string | undefined>): AlertWebhookConfig {
  const raw = env.ALERT_WEBHOOK_URL?.trim() || null;
  const secret = env.ALERT_WEBHOOK_SECRET?.trim() ?? '';
  if (raw) {
    let u: URL;
    try { u = new URL(raw); } catch { throw new ConfigError(`ALERT_WEBHOOK_URL must be an http(s) URL, got "${raw}"`); }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new ConfigError(`ALERT_WEBHOOK_URL must be an http(s) URL, got "${raw}"`);
    if (secret.length < 16) throw new ConfigError('ALERT_WEBHOOK_SECRET (at least 16 characters) is required with ALERT_WEBHOOK_URL: receivers verify the signature with it');
  }
  const retryMs = readIntEnv(env, 'ALERT_WEBHOOK_RETRY_MS', 5000, 1, 86_400_000);
  return {
    url: raw, secret,
    timeoutMs: readIntEnv(env, 'ALERT_WEBHOOK_TIMEOUT_MS', 10_000, 100, 600_000),
    maxAttempts: readIntEnv(env, 'ALERT_WEBHOOK_MAX_ATTEMPTS', 12, 1, 1000),
    retryMs,
    retryMaxMs: readIntEnv(env, 'ALERT_WEBHOOK_RETRY_MAX_MS', 3_600_000, retryMs, 86_400_000),
    pollMs: Math.min(retryMs, 5000),
    retentionDays: readIntEnv(env, 'ALERT_OUTBOX_RETENTION_DAYS', 30, 0, 36_500),
    pruneMs: readIntEnv(env, 'ALERT_OUTBOX_PRUNE_MS', 3_600_000, 100, 86_400_000),
  };
}
