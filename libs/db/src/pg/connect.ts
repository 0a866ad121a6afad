import postgres from 'postgres';

/**
 * A postgres.js client for a DATABASE_URL, also in libpq's Unix-socket form, where the socket's folder is the
 * `host` parameter: `postgres:///gateway?host=/var/run/postgresql&user=gw`. The configuration accepts that form,
 * but postgres.js reads the host from the URL's authority only and sends `host` to the server as a setting, which
 * refused the connection ("unrecognized configuration parameter"; `postgres://gw@/gateway?host=…` did not even
 * parse). Such a URL is given to postgres.js as `path` (the socket file) and a URL without those parameters.
 */
export function connectPg(url: string, options: postgres.Options<Record<string, postgres.PostgresType>> = {}): postgres.Sql {
  const { url: target, path } = socketTarget(url);
  return postgres(target, path ? { ...options, path } : options);
}

/** The URL postgres.js can read and the socket file, when `url` names a socket folder as `host`; else `url` as it is. */
export function socketTarget(url: string): { url: string; path: string | null } {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return { url, path: null };
  }
  const dir = u.searchParams.get('host');
  if (!dir?.startsWith('/')) return { url, path: null };
  const q = u.searchParams;
  const port = q.get('port') || u.port || '5432';
  const user = q.get('user') ?? decodeURIComponent(u.username);
  const password = q.get('password') ?? decodeURIComponent(u.password);
  const database = q.get('dbname') ?? decodeURIComponent(u.pathname.slice(1));
  for (const k of ['host', 'port', 'user', 'password', 'dbname']) q.delete(k);
  const auth = user ? `${encodeURIComponent(user)}${password ? `:${encodeURIComponent(password)}` : ''}@` : '';
  const rest = q.toString();
  return {
    url: `${u.protocol}//${auth}localhost:${port}/${encodeURIComponent(database)}${rest ? `?${rest}` : ''}`,
    path: `${dir.replace(/\/+$/, '')}/.s.PGSQL.${port}`,
  };
}
