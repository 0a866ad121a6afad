import { describe, expect, test } from 'bun:test';
import { createLogger, memoryLogger } from './log';

const at = () => new Date('2026-01-02T03:04:05.678Z');

describe('logger', () => {
  test('text: `time level event key=value…`, values with spaces or quotes JSON-quoted, undefined fields left out', () => {
    const { log, lines } = memoryLogger({ now: at });
    log.info('channel.auto_disabled', { channel: 3, reason: 'upstream 500 "x"', skipped: undefined, ok: true });
    expect(lines).toEqual(['2026-01-02T03:04:05.678Z info channel.auto_disabled channel=3 reason="upstream 500 \\"x\\"" ok=true']);
  });

  test('a field cannot forge a second line: newlines are escaped', () => {
    const { log, lines } = memoryLogger({ now: at });
    log.warn('x', { cause: 'a\n2026-01-01T00:00:00Z error forged' });
    expect(lines).toHaveLength(1);
    expect(lines[0]!.split('\n')).toHaveLength(1);
  });

  test('json: one parseable object per line, the stack as a field', () => {
    const { log, lines } = memoryLogger({ now: at, format: 'json' });
    log.error('request.bug', { id: 'r1', status: 500 }, new Error('boom'));
    const o = JSON.parse(lines[0]!);
    expect(o).toMatchObject({ time: '2026-01-02T03:04:05.678Z', level: 'error', event: 'request.bug', id: 'r1', status: 500 });
    expect(o.stack).toContain('Error: boom');
    expect(o.stack).toContain('    at ');
  });

  test('text: only an error given as a bug carries its stack, on the lines after the event', () => {
    const { log, lines } = memoryLogger({ now: at });
    log.error('request.bug', { id: 'r1' }, new Error('boom'));
    const [first, ...rest] = lines[0]!.split('\n');
    expect(first).toBe('2026-01-02T03:04:05.678Z error request.bug id=r1');
    expect(rest[0]).toContain('Error: boom');
    expect(rest.some((l) => /^\s+at /.test(l))).toBe(true);
  });

  test('levels below LOG_LEVEL are dropped; the default sink splits stdout (debug, info) from stderr (warn, error)', () => {
    const seen: string[] = [];
    const log = createLogger({ level: 'warn', now: at, write: (line, level) => seen.push(`${level}:${line}`) });
    log.debug('a');
    log.info('b');
    log.warn('c');
    log.error('d');
    expect(seen).toEqual(['warn:2026-01-02T03:04:05.678Z warn c', 'error:2026-01-02T03:04:05.678Z error d']);
  });
});
