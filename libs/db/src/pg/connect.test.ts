import { afterAll, describe, expect, test } from 'bun:test';
import { existsSync } from 'node:fs';
import { connectPg, socketOptions } from './connect';
import { openPostgres } from './client';

describe('socketOptions', () => {
  test('a TCP URL is used as it is', () => {
    for (const url of ['postgres://gw:pw@db:5432/gateway', 'postgresql://gw@db/gateway?sslmode=require', 'postgres://a,b/gw', 'postgres:///db?host=db.example']) {
      expect(socketOptions(url)).toBeNull();
    }
  });

  test("libpq's socket form: the socket file as path, the rest decoded as libpq does", () => {
    expect(socketOptions('postgres:///gateway?host=/var/run/postgresql&user=gw'))
      .toEqual({ path: '/var/run/postgresql/.s.PGSQL.5432', port: 5432, user: 'gw', database: 'gateway', connection: {} });
    expect(socketOptions('postgresql://u:p%40ss@x:6000/db?host=/tmp/&port=6543&application_name=a+b&sslmode=require'))
      .toEqual({ path: '/tmp/.s.PGSQL.6543', port: 6543, user: 'u', pass: 'p@ss', database: 'db', connection: { application_name: 'a+b' } });
    // A base64-style password keeps its + and =; a database name is decoded.
    expect(socketOptions('postgres:///?host=/s&dbname=a%20b&user=me&password=ab+cd%3D%3D'))
      .toEqual({ path: '/s/.s.PGSQL.5432', port: 5432, user: 'me', pass: 'ab+cd==', database: 'a b', connection: {} });
  });

  test('lists of socket folders or ports, and a port that is no number, are refused with a clear message', () => {
    expect(() => socketOptions('postgres:///db?host=/a,/b')).toThrow('a list of socket folders or ports is not supported');
    expect(() => socketOptions('postgres:///db?host=/a&port=5432,5433')).toThrow('a list of socket folders or ports is not supported');
    expect(() => socketOptions('postgres:///db?host=/a&port=abc')).toThrow('port must be a number');
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
