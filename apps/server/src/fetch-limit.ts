/**
 * Bun runs at most BUN_CONFIG_MAX_HTTP_REQUESTS outbound fetches at once (default 256) and queues the rest
 * silently; it reads the variable only when the process starts. So, imported first by the server entry,
 * this re-executes the process once, in place (same pid, so supervisors and signals are unaffected), with
 * the variable sized to the gateway's upstream cap (MAX_UPSTREAM_CONNECTIONS, else derived from the open
 * file limit) plus headroom. An operator's own BUN_CONFIG_MAX_HTTP_REQUESTS is left as it is.
 */
import { openFileLimit } from '@gw/core/process-limits';
import { wantedFetchLimit } from '@gw/relay/upstream-slots';
import { join } from 'node:path';

// Only when the server entry is what this process runs: importing it from elsewhere must not restart anything.
const wanted = Bun.main === join(import.meta.dir, 'index.ts') ? wantedFetchLimit(process.env, openFileLimit()) : null;
// A compiled binary's argv holds no script path to re-run: it keeps Bun's default (documented).
const compiled = Bun.main.startsWith('/$bunfs/') || Bun.main.startsWith('B:/~BUN/');
if (wanted !== null && !compiled && typeof process.execve === 'function') {
  try {
    process.execve(process.execPath, [process.execPath, ...process.execArgv, ...process.argv.slice(1)],
      { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: String(wanted) });
  } catch (e) {
    process.stderr.write(`Could not restart with BUN_CONFIG_MAX_HTTP_REQUESTS=${wanted} (${(e as Error)?.message ?? e}); outbound fetches stay at Bun's default\n`);
  }
}
