/**
 * What every command action receives: the global options, I/O, credentials and a ready API client,
 * plus `action()`, the wrapper that lets commands return exit codes instead of exiting.
 */
import type { Command } from 'commander';
import { ApiClient } from './client';
import { configPath, readConfig, resolveCredentials, type Credentials, type StoredConfig } from './config';
import { UsageError } from './errors';
import type { Io } from './io';

/** Options defined on the root program and valid on every command. */
export interface GlobalOptions {
  url?: string;
  token?: string;
  json?: boolean;
}

/** Per-invocation context handed to a command handler. */
export class Ctx {
  constructor(readonly io: Io, readonly globals: GlobalOptions) {}

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

  /** A client carrying the management token; a usage error when not logged in. */
  client(opts: { timeoutMs?: number } = {}): ApiClient {
    const c = this.credentials();
    if (!c.token) throw new UsageError(`not logged in to ${c.url}: run \`gw login\`, or pass --token / set GATEWAY_TOKEN`);
    return new ApiClient({ url: c.url, token: c.token, timeoutMs: opts.timeoutMs });
  }

  /** Prints `data` as JSON with --json, else the human rendering. */
  print(data: unknown, human: () => string): void {
    this.io.out(this.json ? `${JSON.stringify(data, null, 2)}\n` : human());
  }
}

/** A command body: positional arguments, the command's own options, and the context. */
export type Handler = (ctx: Ctx, args: any[], opts: Record<string, any>) => Promise<number | void>;

/** Shared state of one CLI run: I/O and the exit code the action produced. */
export class App {
  code = 0;
  constructor(readonly io: Io) {}

  /** Wraps a handler as a commander action; its return value (default 0) becomes the exit code. */
  action(handler: Handler): (...a: any[]) => Promise<void> {
    return async (...a: any[]) => {
      const cmd = a[a.length - 1] as Command;
      const opts = a[a.length - 2] as Record<string, any>;
      const ctx = new Ctx(this.io, cmd.optsWithGlobals() as GlobalOptions);
      this.code = (await handler(ctx, a.slice(0, -2), opts)) ?? 0;
    };
  }
}
