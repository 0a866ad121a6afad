/**
 * The server's one logger: one line per event, `time level event key=value…` (or one JSON object per
 * line), so an operator can grep and a collector can parse. Expected failures (a client's 4xx, an
 * upstream's 5xx) are ordinary events; only real bugs carry a stack trace, passed as `err`.
 */

export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export const LOG_FORMATS = ['text', 'json'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/** Values of a log line. `undefined` fields are left out, so call sites can pass optional data as is. */
export type LogFields = Record<string, string | number | boolean | null | undefined>;

export interface Logger {
  debug(event: string, fields?: LogFields): void;
  info(event: string, fields?: LogFields): void;
  warn(event: string, fields?: LogFields): void;
  /** `err` is a real bug: its stack is written (text: on the following lines; JSON: a `stack` field). */
  error(event: string, fields?: LogFields, err?: unknown): void;
}

export interface LoggerOptions {
  level?: LogLevel;
  format?: LogFormat;
  /** Where finished lines go; by default debug/info to stdout, warn/error to stderr. */
  write?: (line: string, level: LogLevel) => void;
  now?: () => Date;
}

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

/** Writes to the process's standard streams: what a supervisor (systemd, docker) collects. */
export const stdWrite = (line: string, level: LogLevel) => {
  if (RANK[level] >= RANK.warn) process.stderr.write(line + '\n');
  else process.stdout.write(line + '\n');
};

/**
 * What a terminal or log viewer would act on rather than show: C0 controls, DEL, the C1 controls (NEL is a
 * line break to some tools, CSI an escape sequence to others), the Unicode line and paragraph separators, and
 * the bidirectional overrides and isolates that reorder what follows them, and the marks (LRM, RLM, ALM). Values carry text that clients,
 * upstreams and admins chose (a channel name, an upstream's error); `JSON.stringify` escapes only C0.
 */
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
const escapeUnsafe = (s: string) => s.replace(UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
const ANY_UNSAFE = new RegExp(UNSAFE.source);

/** A bare word stays as is; anything with spaces, quotes, `=` or control characters is JSON-quoted, controls escaped. */
const textValue = (v: string | number | boolean | null) => {
  const s = String(v);
  return /^[^\s"=\\]+$/.test(s) && !ANY_UNSAFE.test(s) ? s : escapeUnsafe(JSON.stringify(s));
};

function stackOf(err: unknown): string {
  if (err instanceof Error) {
    const cause = err.cause instanceof Error ? `\ncaused by: ${err.cause.stack ?? err.cause.message}` : '';
    return (err.stack ?? `${err.name}: ${err.message}`) + cause;
  }
  return String(err);
}

/**
 * A stack as text lines: the frames one a line, each message (text a client or an upstream chose: an upstream's
 * error, a value a query refused) on one line with its line breaks escaped, so a message cannot add a line that
 * reads like the frames or like a log line of its own.
 */
function stackLines(err: unknown): string[] {
  if (!(err instanceof Error)) return [oneLine(String(err))];
  const lines = framesOf(err);
  if (err.cause instanceof Error) {
    const [first = '', ...rest] = framesOf(err.cause);
    lines.push(`caused by: ${first}`, ...rest);
  }
  return lines;
}

function framesOf(e: Error): string[] {
  const head = e.message ? `${e.name}: ${e.message}` : e.name;
  const stack = e.stack ?? head;
  if (stack.startsWith(head)) return [oneLine(head), ...stack.slice(head.length).split('\n').slice(1)];
  // A stack that does not start with its message (rewritten by someone): its lines are kept, the message still shown once.
  return [oneLine(head), ...stack.split('\n').filter((l) => /^\s+at /.test(l))];
}

const oneLine = (s: string) => s.replace(/\n/g, '\\n');

export function createLogger(opts: LoggerOptions = {}): Logger {
  const min = RANK[opts.level ?? 'info'];
  const write = opts.write ?? stdWrite;
  const now = opts.now ?? (() => new Date());
  const json = opts.format === 'json';
  const emit = (level: LogLevel, event: string, fields: LogFields = {}, err?: unknown) => {
    if (RANK[level] < min) return;
    const time = now().toISOString();
    const entries = Object.entries(fields).filter((e): e is [string, string | number | boolean | null] => e[1] !== undefined);
    if (json) {
      const o: Record<string, unknown> = { time, level, event, ...Object.fromEntries(entries) };
      if (err !== undefined) o.stack = stackOf(err);
      // Escapes inside JSON strings (the only place such characters can be): still the same JSON value.
      write(escapeUnsafe(JSON.stringify(o)), level);
      return;
    }
    let line = `${time} ${level} ${event}`;
    for (const [k, v] of entries) line += ` ${k}=${textValue(v)}`;
    // The stack keeps its line breaks (each line indented), its messages do not; anything else a terminal would act on is escaped.
    if (err !== undefined) line += '\n' + stackLines(err).map((l) => '  ' + escapeUnsafe(l)).join('\n');
    write(line, level);
  };
  return {
    debug: (e, f) => emit('debug', e, f),
    info: (e, f) => emit('info', e, f),
    warn: (e, f) => emit('warn', e, f),
    error: (e, f, err) => emit('error', e, f, err),
  };
}

/** Info level, text, standard streams: the default of a library used without a configured logger. */
export const stdLogger: Logger = createLogger();

/** A logger that drops everything (benchmarks, tests that check nothing in the log). */
export const silentLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };

/** One-line text of anything thrown, for a log field (no stack: the event is expected). */
export const errorText = (e: unknown) => (e instanceof Error ? e.message : String(e)).replace(/\s+/g, ' ').trim();

/** A logger that keeps its lines in memory (text format unless told): tests read what would be written. */
export function memoryLogger(opts: Omit<LoggerOptions, 'write'> = {}): { log: Logger; lines: string[] } {
  const lines: string[] = [];
  return { log: createLogger({ level: 'debug', ...opts, write: (line) => lines.push(line) }), lines };
}
