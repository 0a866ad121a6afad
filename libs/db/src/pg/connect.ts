import postgres from 'postgres';

type PgOptions = postgres.Options<Record<string, postgres.PostgresType>>;

/**
 * A postgres.js client for a DATABASE_URL, also in libpq's Unix-socket form, where the socket's folder is the
 * `host` parameter: `postgres:///gateway?host=/var/run/postgresql&user=gw`. The configuration accepts that form,
 * but postgres.js reads the host from the URL's authority only and sends `host` to the server as a setting, which
 * refused the connection ("unrecognized configuration parameter"; `postgres://gw@/gateway?host=…` did not even
 * parse). Such a URL is given to postgres.js as options: the socket file as `path`, the rest as libpq reads it.
 */
export function connectPg(url: string, options: PgOptions = {}): postgres.Sql {
  const socket = socketOptions(url);
  if (!socket) return postgres(url, options);
  return postgres({ ...options, ...socket, connection: { ...socket.connection, ...options.connection } });
}

/**
 * postgres.js's options for a URL that names a socket folder as `host`; null for any other URL (used as it is).
 * Values are percent-decoded as libpq does (a `+` stays a `+`); `sslmode`/`ssl` are dropped, as libpq never uses
 * TLS on a socket; every other parameter is a setting of the session (e.g. application_name).
 */
export function socketOptions(url: string): (PgOptions & { path: string; connection: Record<string, string> }) | null {
  const m = /^postgres(?:ql)?:\/\/([^/?#]*)([^?#]*)(?:\?([^#]*))?/i.exec(url);
  if (!m) return null;
  const params = new Map<string, string>();
  for (const pair of (m[3] ?? '').split('&')) {
    if (!pair) continue;
    const i = pair.indexOf('=');
    const k = decode(i < 0 ? pair : pair.slice(0, i));
    if (!params.has(k)) params.set(k, decode(i < 0 ? '' : pair.slice(i + 1)));
  }
  const dir = params.get('host');
  if (!dir?.startsWith('/')) return null;
  const authority = m[1]!;
  const at = authority.lastIndexOf('@');
  const [authUser, authPass] = at < 0 ? [] : authority.slice(0, at).split(':').map(decode);
  const authPort = /:(\d+)$/.exec(at < 0 ? authority : authority.slice(at + 1))?.[1];
  const port = params.get('port') || authPort || '5432';
  if (dir.includes(',') || port.includes(',')) throw new Error('DATABASE_URL: a list of socket folders or ports is not supported; name one');
  if (!/^\d+$/.test(port)) throw new Error(`DATABASE_URL: port must be a number, got "${port}"`);
  const user = params.get('user') ?? authUser;
  const pass = params.get('password') ?? authPass;
  const database = params.get('dbname') ?? decode(m[2]!.replace(/^\//, ''));
  const connection: Record<string, string> = {};
  for (const [k, v] of params) if (!['host', 'port', 'user', 'password', 'dbname', 'sslmode', 'ssl'].includes(k)) connection[k] = v;
  return {
    path: `${dir.replace(/\/+$/, '')}/.s.PGSQL.${port}`, port: Number(port),
    ...(user ? { user } : {}), ...(pass ? { pass } : {}), ...(database ? { database } : {}), connection,
  };
}

function decode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
