import { afterAll, describe, expect, test } from 'bun:test';
import { existsSync } from 'node:fs';
import { connectPg, socketTarget } from './connect';
import { openPostgres } from './client';

describe('socketTarget', () => {
  test('a TCP URL is left as it is', () => {
    for (const url of ['postgres://gw:pw@db:5432/gateway', 'postgresql://gw@db/gateway?sslmode=require', 'postgres://a,b/gw']) {
      expect(socketTarget(url)).toEqual({ url, path: null });
    }
  });

  test("libpq's socket form becomes postgres.js's path and a URL without the socket parameters", () => {
    expect(socketTarget('postgres:///gateway?host=/var/run/postgresql&user=gw')).toEqual({ url: 'postgres://gw@localhost:5432/gateway', path: '/var/run/postgresql/.s.PGSQL.5432' });
    expect(socketTarget('postgresql://u:p%40ss@x/db?host=/tmp/&port=6543&application_name=gw'))
      .toEqual({ url: 'postgresql://u:p%40ss@localhost:6543/db?application_name=gw', path: '/tmp/.s.PGSQL.6543' });
    expect(socketTarget('postgres:///?host=/s&dbname=a%20b&user=me&password=x%26y'))
      .toEqual({ url: 'postgres://me:x%26y@localhost:5432/a%20b', path: '/s/.s.PGSQL.5432' });
  });
});

// The local server's socket (the development and CI machines have one); skipped where there is none.
const SOCKET_DIR = process.env.GW_TEST_PG_SOCKET_DIR ?? '/var/run/postgresql';
const hasSocket = existsSync(`${SOCKET_DIR}/.s.PGSQL.5432`);
const schema = `gw_sock_${process.pid}`;
const url = `postgres:///test?host=${SOCKET_DIR}&user=postgres`;

describe.skipIf(!hasSocket)('over the Unix socket', () => {
  afterAll(async () => {
    const sql = connectPg(url, { max: 1, onnotice: () => {} });
    await sql`drop schema if exists ${sql(schema)} cascade`;
    await sql.end({ timeout: 1 });
  });

  test('openPostgres connects, migrates and queries through the socket (no server address: not TCP)', async () => {
    const h = await openPostgres(url, { schema });
    try {
      const [row] = await h.sql<{ addr: string | null; s: string }[]>`select inet_server_addr() as addr, current_schema() as s`;
      expect(row).toEqual({ addr: null, s: schema });
      expect((await h.sql`select count(*)::int as n from admission_start`)[0]).toEqual({ n: 0 });
    } finally {
      await h.close();
    }
  }, 30_000);
});
