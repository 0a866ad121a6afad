import { describe, expect, test } from 'bun:test';
import { Database } from 'bun:sqlite';
import { GatewayError, toGatewayError } from './errors';

const pgError = (code: string) => Object.assign(new Error(`pg ${code}`), { name: 'PostgresError', code });
const wrapped = (cause: unknown) => new Error('Failed query: insert into ...', { cause });

describe('toGatewayError', () => {
  test('the database or cache being unreachable is a retryable 503, however deep drizzle wrapped it', () => {
    const unreachable = [
      Object.assign(new Error('write CONNECTION_CLOSED 127.0.0.1:5432'), { code: 'CONNECTION_CLOSED' }),
      Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
      pgError('57P01'), pgError('57P03'), pgError('08006'), pgError('53300'), pgError('53100'),
      Object.assign(new Error('database is locked'), { name: 'SQLiteError', code: 'SQLITE_BUSY' }),
      Object.assign(new Error('disk I/O error'), { name: 'SQLiteError', code: 'SQLITE_IOERR_WRITE' }),
      Object.assign(new Error('Reached the max retries per request limit'), { name: 'MaxRetriesPerRequestError' }),
      new Error('Connection is closed.'),
    ];
    for (const e of unreachable) {
      for (const err of [e, wrapped(e), wrapped(wrapped(e))]) {
        const gw = toGatewayError(err);
        expect({ status: gw.status, code: gw.code, retry: gw.headers['retry-after'] }).toEqual({ status: 503, code: 'storage_unavailable', retry: '1' });
        expect(gw.cause).toBe(err);
      }
    }
  });

  test('other database errors stay 500 (a bug), the request-side ones 400, and GatewayErrors pass through', () => {
    const db = new Database(':memory:');
    let sqliteErr: unknown;
    try { db.run('select * from nope'); } catch (e) { sqliteErr = e; }
    for (const e of [sqliteErr, pgError('42P01'), pgError('23505'), pgError('57014'), new TypeError('x is undefined'), Object.assign(new Error('x'), { code: 'SQLITE_CONSTRAINT_UNIQUE' })]) {
      expect(toGatewayError(wrapped(e)).status).toBe(500);
    }
    expect(toGatewayError(wrapped(pgError('22003'))).status).toBe(400);
    const own = new GatewayError(409, 'x', 'y');
    expect(toGatewayError(own)).toBe(own);
  });
});
