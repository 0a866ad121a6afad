/**
 * Limits of this process that size the gateway: open file descriptors and Bun's cap on concurrent
 * outbound fetches. Bun has no getrlimit/setrlimit; on Linux the limits are read from /proc. Bun itself
 * raises the soft descriptor limit to the hard one at start-up, so the soft limit read here is what the
 * process really has; only a privileged `ulimit -Hn` before start can raise it further.
 */
import { readFileSync } from 'node:fs';

/** Bun's default BUN_CONFIG_MAX_HTTP_REQUESTS, and the largest value it accepts. */
export const BUN_FETCH_DEFAULT = 256;
export const BUN_FETCH_MAX = 65_535;

/** The soft RLIMIT_NOFILE of this process; null when unknown (not Linux) or unlimited. */
export function openFileLimit(limitsText?: string): number | null {
  let text = limitsText;
  if (text === undefined) {
    try {
      text = readFileSync('/proc/self/limits', 'utf8');
    } catch {
      return null;
    }
  }
  const m = /^Max open files\s+(\S+)/m.exec(text);
  const n = m ? Number(m[1]) : NaN;
  return Number.isSafeInteger(n) && n > 0 ? n : null;
}

/**
 * Outbound fetches Bun runs at once in this process: BUN_CONFIG_MAX_HTTP_REQUESTS as it was when the
 * process started (Bun reads it only then; setting it later has no effect), else Bun's default.
 */
export function bunFetchLimit(env: Record<string, string | undefined> = process.env): number {
  const n = Number(env.BUN_CONFIG_MAX_HTTP_REQUESTS);
  return Number.isSafeInteger(n) && n >= 1 && n <= BUN_FETCH_MAX ? n : BUN_FETCH_DEFAULT;
}
