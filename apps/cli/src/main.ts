/**
 * Builds the `gw` program and runs it. This is the only place that maps outcomes to exit codes:
 * commands return a code or throw, and commander's own errors become usage errors (2).
 */
import { Command, CommanderError, Option } from 'commander';
import pkg from '../package.json';
import { App } from './core/context';
import { ApiError, EXIT, InterruptedError, UnreachableError, UsageError } from './core/errors';
import type { Io } from './core/io';
import { registerSession } from './commands/session';
import { registerToken } from './commands/token';
import { registerPassword } from './commands/password';
import { registerChannel } from './commands/channel';
import { registerUser } from './commands/user';
import { registerKey } from './commands/key';
import { registerPricing } from './commands/pricing';
import { registerLog } from './commands/log';
import { registerTopup } from './commands/topup';
import { registerLedger } from './commands/ledger';

const ROOT_HELP = `
Credentials: --url/--token flags, then GATEWAY_URL/GATEWAY_TOKEN, then the config file written by
\`gw login\` ($GW_CONFIG, $XDG_CONFIG_HOME/ai-gateway/config.json or ~/.config/ai-gateway/config.json).

Exit codes: 0 success, 1 the server refused the request (or a channel test failed), 2 usage error,
3 gateway unreachable, 130 prompt interrupted.

Examples:
  $ gw login --url http://localhost:3000 -u root
  $ gw channel list --status 1 --page-size 50
  $ gw key create --name laptop --json | jq -r .key`;

/** Builds the program; every command registers into `app` so its exit code is collected there. */
export function buildProgram(app: App): Command {
  const program = new Command('gw')
    .description('Operate an AI gateway from the terminal (management API client)')
    .version(pkg.version, '-V, --version')
    .addOption(new Option('--url <url>', 'gateway URL (env GATEWAY_URL)'))
    .addOption(new Option('--token <token>', 'management access token (env GATEWAY_TOKEN, which unlike a flag does not show in ps)'))
    .option('--json', 'print the exact JSON data of the answer (for scripts)')
    .showHelpAfterError('(add --help for usage)')
    .configureHelp({ showGlobalOptions: true })
    .configureOutput({ writeOut: (s) => app.io.out(s), writeErr: (s) => app.io.err(s) })
    // Settings above are inherited by every command created below via .command().
    .exitOverride()
    .addHelpText('after', ROOT_HELP);
  registerSession(program, app);
  registerPassword(program, app);
  registerToken(program, app);
  registerChannel(program, app);
  registerUser(program, app);
  registerKey(program, app);
  registerPricing(program, app);
  registerLog(program, app);
  registerTopup(program, app);
  registerLedger(program, app);
  return program;
}

/** Runs the CLI on `argv` (without the runtime and script path) and returns the exit code. */
export async function main(argv: string[], io: Io): Promise<number> {
  const app = new App(io);
  try {
    await buildProgram(app).parseAsync(argv, { from: 'user' });
    return app.code;
  } catch (e) {
    return report(e, io);
  }
}

function report(e: unknown, io: Io): number {
  // Commander has already printed its message (or the help) itself.
  if (e instanceof CommanderError) return e.exitCode === 0 ? EXIT.ok : EXIT.usage;
  if (e instanceof UsageError) { io.err(`error: ${e.message}\n`); return EXIT.usage; }
  if (e instanceof ApiError) { io.err(`error: ${e.message} (${e.code})\n`); return EXIT.refused; }
  if (e instanceof UnreachableError) { io.err(`error: ${e.message}\n`); return EXIT.unreachable; }
  if (e instanceof InterruptedError) { io.err('\ninterrupted\n'); return EXIT.interrupted; }
  io.err(`error: unexpected failure: ${e instanceof Error ? e.stack ?? e.message : String(e)}\n`);
  return EXIT.refused;
}
