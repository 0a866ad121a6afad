/** HOST checked before the server binds to it. */
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { ConfigError } from '@gw/config';

/**
 * A HOST name that does not resolve stops start-up naming it. Bun reports such a name with an unrelated
 * errno when it binds (EINVAL, ENOTTY, even EADDRINUSE, which read "port … is already in use").
 */
export async function checkListenHost(host: string): Promise<void> {
  if (isIP(host.replace(/^\[(.*)\]$/, '$1'))) return;
  try {
    await lookup(host);
  } catch (e) {
    throw new ConfigError(`HOST: ${host} does not resolve (${(e as NodeJS.ErrnoException)?.code ?? e})`);
  }
}

/** The host as a URL writes it: an IPv6 address in brackets (`http://::1:3000` parses as no URL). */
export function urlHost(host: string): string {
  return isIP(host) === 6 ? `[${host}]` : host;
}
