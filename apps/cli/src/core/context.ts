/**
 * What every command action receives: the global options, I/O, credentials and a ready API client,
 * plus `action()`, the wrapper that lets commands return exit codes instead of exiting.
 */
import type { Command } from 'commander';
import { ApiClient } from './client';
import { configPath, plainHttpElsewhere, readConfig, resolveCredentials, shownUrl, type Credentials, type StoredConfig } from './config';
import { ApiError, UsageError } from './errors';
import type { Io } from './io';
import { jsonText, oneLine, terminalText } from './output';
import { inCliTerms, paramTable } from './params';

/** Options defined on the root program and valid on every command. */
export interface GlobalOptions {
  url?: string;
  token?: string;
  json?: boolean;
}

/** Per-invocation context handed to a command handler. */
export class Ctx {
  constructor(readonly io: Io, readonly globals: GlobalOptions, private readonly app: App) {}

  /** `--json`: print the API's data unchanged. */
  get json(): boolean { return Boolean(this.globals.json); }

  get configPath(): string { return configPath(this.io.env); }

  private stored?: StoredConfig;

  /** The config file, read once per run (so a permissions warning is printed once). */
  readConfig(): StoredConfig {
    this.stored ??= readConfig(this.configPath, (m) => this.io.err(`${m}\n`));
    return this.stored;
  }

  /** URL and token by flags > env > file; a usage error when no URL is known at all. */
  credentials(): Credentials {
    const c = resolveCredentials(this.globals, this.io.env, this.readConfig());
    if (!c) throw new UsageError('no gateway URL: pass --url, set GATEWAY_URL, or run `gw login --url <url>` first');
    return c;
  }

  /**
   * A client carrying the management token. Without a token the request is still sent: the gateway's
   * 401 becomes "not logged in" (exit 1), and an unreachable gateway stays exit 3 either way.
   */
  client(opts: { timeoutMs?: number } = {}): ApiClient {
    const c = this.credentials();
    if (c.token) this.warnPlainHttp(c.url);
    return new ApiClient({ url: c.url, token: c.token, timeoutMs: opts.timeoutMs });
  }

  /** A client without credentials, for public routes (health, password reset). */
  anonClient(): ApiClient {
    return new ApiClient({ url: this.credentials().url });
  }

  /**
   * Before a credential (token, password, reset token) goes to `url`: a warning on stderr, once per run, when that
   * is plain http to another machine. Not refused: a gateway on a private network may be reached that way on
   * purpose, and GW_ALLOW_HTTP=1 then silences it.
   */
  warnPlainHttp(url: string): void {
    if (this.app.warnedHttp || this.io.env.GW_ALLOW_HTTP === '1' || !plainHttpElsewhere(url)) return;
    this.app.warnedHttp = true;
    this.note(`warning: sending credentials to ${url} over plain http: anyone on the network path can read and reuse them; use https (GW_ALLOW_HTTP=1 silences this)\n`);
  }

  /** The caller (`GET /api/user/self`), fetched at most once per run. */
  self(): Promise<Record<string, any>> {
    this.app.selfCache ??= this.client().call('GET', '/api/user/self');
    return this.app.selfCache;
  }

  /**
   * Prints `data` as JSON with --json, else the human rendering. Either way nothing the server or an
   * upstream sent can drive the operator's terminal (see `terminalText` and `jsonText`).
   */
  print(data: unknown, human: () => string): void {
    this.io.out(this.json ? `${jsonText(data, 2)}\n` : terminalText(human()));
  }

  /**
   * Data printed as served (an export, the metrics text): exact into a pipe or file, but on a terminal other
   * people's text in it (a model name, a key name) is made inert like `print`'s.
   */
  raw(text: string): void {
    this.io.out(this.io.outIsTerminal ? terminalText(text) : text);
  }

  /**
   * A one-line note or warning on stderr, made safe for the terminal like `print`; a newline inside (an upstream's
   * error text in `channel test`) becomes a space, so the text cannot add a line that looks like the CLI's own.
   */
  note(text: string): void {
    this.io.err(`${oneLine(text.replace(/\n$/, ''))}\n`);
  }

  /**
   * A value printed alone on stdout for scripts to capture (a new key, token, password or backup codes): made inert
   * like `print`, since it comes from whatever answers at the URL, and one line per value so `$(gw key create)`
   * captures the key and nothing a hostile answer appended.
   */
  secretLines(values: unknown[]): void {
    this.io.out(values.map((v) => `${oneLine(String(v))}\n`).join(''));
  }
}

/** A command body: positional arguments, the command's own options, and the context. */
export type Handler = (ctx: Ctx, args: any[], opts: Record<string, any>) => Promise<number | void>;

/** Shared state of one CLI run: I/O, the exit code the action produced, and per-run caches. */
export class App {
  code = 0;
  selfCache?: Promise<Record<string, any>>;
  /** The plain-http warning was printed (once per run). */
  warnedHttp = false;
  constructor(readonly io: Io) {}

  /**
   * Wraps a handler as a commander action; its return value (default 0) becomes the exit code.
   * A server refusal is put in the command's terms here, the one place that knows which command ran.
   */
  action(handler: Handler): (...a: any[]) => Promise<void> {
    return async (...a: any[]) => {
      const cmd = a[a.length - 1] as Command;
      const opts = a[a.length - 2] as Record<string, any>;
      const ctx = new Ctx(this.io, cmd.optsWithGlobals() as GlobalOptions, this);
      try {
        this.code = (await handler(ctx, a.slice(0, -2), opts)) ?? 0;
      } catch (e) {
        if (e instanceof ApiError) explain(e, ctx, cmd);
        throw e;
      }
    };
  }
}

/** Fills in the CLI's wording of a server refusal: flags for fields, and "not logged in" for a tokenless 401. */
function explain(e: ApiError, ctx: Ctx, cmd: Command): void {
  const { message, flag } = inCliTerms(e, paramTable(cmd));
  e.cliMessage = message;
  e.flag = flag;
  if (e.status === 401 && e.withoutCredentials) {
    const { url } = ctx.credentials();
    const env = ctx.io.env;
    e.cliMessage = env.GATEWAY_TOKEN && env.GATEWAY_URL
      ? `not logged in to ${url}: GATEWAY_TOKEN belongs to GATEWAY_URL ${shownUrl(env.GATEWAY_URL)} and is not sent elsewhere; pass --token or set both`
      : `not logged in to ${url}: run \`gw login\`, or pass --token / set GATEWAY_TOKEN`;
  }
}
