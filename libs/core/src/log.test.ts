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

  test('a field cannot drive the terminal or reorder the line: ESC, DEL, C1, separators and bidi controls are escaped', () => {
    const hostile = 'prod\u001b[2J\u001b]0;owned\u0007\u007f\u0085\u009b31m\u2028\u2029\u202eevil\u2066x\u200f\u061c\rEND';
    for (const format of ['text', 'json'] as const) {
      const { log, lines } = memoryLogger({ now: at, format });
      log.warn('channel.key_undecryptable', { name: hostile, bare: 'a\u001bb' });
      log.error('request.bug', { id: 'r1' }, new Error(`boom ${hostile}`));
      for (const line of lines) {
        // Nothing a terminal acts on is left, only the line breaks before each stack line (text).
        expect(line.replace(/\n  /g, '')).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/);
      }
      // The value is still there, readable and exact once decoded.
      if (format === 'json') {
        expect(JSON.parse(lines[0]!)).toMatchObject({ name: hostile, bare: 'a\u001bb' });
        expect(JSON.parse(lines[1]!).stack).toContain(`boom ${hostile}`);
      } else {
        const m = / name=("(?:[^"\\]|\\.)*")/.exec(lines[0]!)!;
        expect(JSON.parse(m[1]!)).toBe(hostile);
        expect(lines[0]).toContain(' bare="a\\u001bb"');
        expect(lines[1]).toContain('\\u001b[2J');
      }
    }
  });

  test('text: an error message cannot add lines to the stack (it reads as one, line breaks escaped); the frames keep theirs', () => {
    const { log, lines } = memoryLogger({ now: at });
    const forged = '2026-01-01T00:00:00.000Z error admin.login_ok user=root';
    const cause = new Error(`upstream said\r\n${forged}`);
    log.error('request.bug', { id: 'r1' }, new Error(`boom\n${forged}`, { cause }));
    log.error('request.bug', { id: 'r2' }, `thrown text\n${forged}`);
    for (const line of lines) {
      const [, ...stack] = line.split('\n');
      // Every line after the event is a message (Error…, caused by…, a thrown value) or a frame: nothing else.
      for (const l of stack) expect(l).toMatch(/^ {2}(Error: |caused by: Error: |thrown text|\s+at )/);
      expect(line).toContain(`\\n${forged}`);
    }
    expect(lines[0]).toContain('  Error: boom\\n2026-01-01T00:00:00.000Z');
    expect(lines[0]).toContain('  caused by: Error: upstream said\\u000d\\n2026');
    expect(lines[0]!.split('\n').filter((l) => /^\s+at /.test(l)).length).toBeGreaterThan(1);
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
