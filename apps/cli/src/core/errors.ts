/**
 * The CLI's failure kinds and their exit codes. Commands throw these; `main` is the one place that
 * turns them into a message on stderr and an exit code, so scripts can branch on the code alone.
 */

/** Exit codes of every command (documented in `gw --help`). */
export const EXIT = {
  ok: 0,
  /** The server answered with an error (validation, auth, not found, conflict, ...). */
  refused: 1,
  /** Bad command line: unknown command/flag, missing or malformed argument, missing credentials. */
  usage: 2,
  /** The gateway could not be reached (connection refused, DNS, timeout). */
  unreachable: 3,
  /** The user interrupted a prompt (Ctrl-C), as shells report SIGINT. */
  interrupted: 130,
  /** Stdout was closed by its reader (`gw log export | head`), as shells report SIGPIPE. */
  brokenPipe: 141,
} as const;

/** A problem with how the CLI was invoked; exit code 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** The server's error object as it came over the wire (`{message, type, param, code}` and anything else). */
export type ServerError = Record<string, unknown>;

/** The server answered with an error object (or refused in a way the CLI learnt from it); exit code 1. */
export class ApiError extends Error {
  override readonly name = 'ApiError';
  /** Seconds from a `retry-after` header (rate limits, locked accounts). */
  retryAfter?: number;
  /** The error object exactly as the server sent it, for `--json` errors. */
  server?: ServerError;
  /** The message in the CLI's terms (flags instead of API fields), set by the command that failed. */
  cliMessage?: string;
  /** The flag that set the offending API field, when known. */
  flag?: string;
  /** The request carried no credentials at all (so a 401 means "not logged in"). */
  withoutCredentials?: boolean;
  constructor(readonly status: number, readonly code: string, message: string, readonly param = '') {
    super(message);
  }
}

/** No answer from the server at all; exit code 3. */
export class UnreachableError extends Error {
  override readonly name = 'UnreachableError';
  constructor(readonly url: string, reason: string) {
    super(`cannot reach the gateway at ${url}: ${reason}`);
  }
}

/**
 * A JSON parser's complaint without the text it quotes (`Unexpected identifier "…"`): the text may be a secret (an
 * unquoted API key in a --json-body file, a token in the config file), and the error lands in CI logs.
 */
export const jsonSyntaxError = (e: unknown): string => (e instanceof Error ? e.message : String(e)).replace(/(["'])(?:(?!\1).)*\1/g, '$1…$1');

/** The user cancelled an interactive prompt. */
export class InterruptedError extends Error {
  override readonly name = 'InterruptedError';
  constructor() { super('interrupted'); }
}
