import { describe, expect, test } from 'bun:test';
import { Database } from 'bun:sqlite';
import { GatewayError, toGatewayError } from './errors';

const pgError = (code: string) => Object.assign(new Error(`pg ${code}`), { name: 'PostgresError', code });
const wrapped = (cause: unknown) => new Error('Failed query: insert into ...', { cause });

describe('toGatewayError', () => {
  test('the database or cache unreachable before the statement ran is a retryable 503, however deep drizzle wrapped it', () => {
    const notDone = [
      Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
      Object.assign(new Error('write CONNECT_TIMEOUT 127.0.0.1:5432'), { code: 'CONNECT_TIMEOUT' }),
      pgError('57P03'), pgError('53300'), pgError('08001'),
      Object.assign(new Error('database is locked'), { name: 'SQLiteError', code: 'SQLITE_BUSY' }),
      Object.assign(new Error('database or disk is full'), { name: 'SQLiteError', code: 'SQLITE_FULL' }),
      new Error("Stream isn't writeable and enableOfflineQueue options is false"),
    ];
    for (const e of notDone) {
      for (const err of [e, wrapped(e), wrapped(wrapped(e))]) {
        const gw = toGatewayError(err);
        expect({ status: gw.status, code: gw.code, retry: gw.headers['retry-after'] }).toEqual({ status: 503, code: 'storage_unavailable', retry: '1' });
        expect(gw.cause).toBe(err);
      }
    }
  });

  test('a connection lost while a statement ran is a 503 that does not invite a blind retry (the write may have committed)', () => {
    const unknown = [
      Object.assign(new Error('write CONNECTION_CLOSED 127.0.0.1:5432'), { code: 'CONNECTION_CLOSED' }),
      Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }),
      pgError('57P01'), pgError('08006'), pgError('53100'),
      Object.assign(new Error('disk I/O error'), { name: 'SQLiteError', code: 'SQLITE_IOERR_WRITE' }),
      Object.assign(new Error('Reached the max retries per request limit'), { name: 'MaxRetriesPerRequestError' }),
      new Error('Connection is closed.'),
    ];
    for (const e of unknown) {
      for (const err of [e, wrapped(e)]) {
        const gw = toGatewayError(err);
        expect({ status: gw.status, code: gw.code, retry: gw.headers['retry-after'] ?? 'none' }).toEqual({ status: 503, code: 'storage_outcome_unknown', retry: 'none' });
      }
    }
  });

  test('other database errors stay 500 (a bug), the request-side ones 400, and GatewayErrors pass through', () => {
    const db = new Database(':memory:');
    let sqliteErr: unknown;
    try { db.run('select * from nope'); } catch (e) { sqliteErr = e; }
    for (const e of [sqliteErr, pgError('42P01'), pgError('23505'), pgError('57014'), new TypeError('x is undefined'), Object.assign(new Error('x'), { code: 'SQLITE_CONSTRAINT_UNIQUE' }), Object.assign(new Error('x'), { code: 'SQLITE_LOCKED' })]) {
      expect(toGatewayError(wrapped(e)).status).toBe(500);
    }
    expect(toGatewayError(wrapped(pgError('22003'))).status).toBe(400);
    // A NUL in text (invalid byte sequence) is said to be one, not a number out of range.
    expect(toGatewayError(wrapped(pgError('22021')))).toMatchObject({ status: 400, code: 'value_out_of_range', message: expect.stringContaining('(NUL)') });
    expect(toGatewayError(wrapped(pgError('22P02'))).message).toContain('A number');
    const own = new GatewayError(409, 'x', 'y');
    expect(toGatewayError(own)).toBe(own);
  });
});
