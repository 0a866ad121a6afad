/**
 * Builds the `gw` program and runs it. This is the only place that maps outcomes to exit codes:
 * commands return a code or throw, and commander's own errors become usage errors (2).
 */
import { Command, CommanderError, Option } from 'commander';
import pkg from '../package.json';
import { App } from './core/context';
import { ApiError, EXIT, InterruptedError, UnreachableError, UsageError } from './core/errors';
import type { Io } from './core/io';
import { jsonText, oneLine, terminalText } from './core/output';
import { registerSession } from './commands/session';
import { registerAccessToken } from './commands/access-token';
import { registerLoginSession } from './commands/login-session';
import { registerPassword } from './commands/password';
import { registerReset } from './commands/reset';
import { registerTwoFactor } from './commands/two-factor';
import { registerProfile } from './commands/profile';
import { registerOps } from './commands/ops';
import { registerChannel } from './commands/channel';
import { registerUser } from './commands/user';
import { registerKey } from './commands/key';
import { registerPricing } from './commands/pricing';
import { registerGroup } from './commands/group';
import { registerLog } from './commands/log';
import { registerTopup } from './commands/topup';
import { registerLedger } from './commands/ledger';
import { registerRedeem } from './commands/redeem';
import { registerBudget } from './commands/budget';

const ROOT_HELP = `
Credentials: --url/--token flags, then GATEWAY_URL/GATEWAY_TOKEN, then the config file written by
\`gw login\` ($GW_CONFIG, $XDG_CONFIG_HOME/ai-gateway/config.json or ~/.config/ai-gateway/config.json).

Exit codes: 0 success, 1 the server refused the request (not logged in, a channel test failed, ...),
2 usage error (the command line itself is wrong), 3 gateway unreachable, 130 prompt interrupted,
141 stdout closed by its reader (\`| head\`).
Errors go to stderr as one line; with --json stdout holds exactly one JSON document, the data or
{"error":{...,"exit_code":N}}, and stderr only lines for a person (warnings, the error line).

Examples:
  $ gw login --url http://localhost:3000 -u root
  $ gw channel list --status 1 --page-size 50
  $ gw key create --name laptop --json | jq -r .key`;

/** Builds the program; every command registers into `app` so its exit code is collected there. */
export function buildProgram(app: App, writeOut: (s: string) => void = (s) => app.io.out(s)): Command {
  const program = new Command('gw')
    .description('Operate an AI gateway from the terminal (management API client)')
    .version(pkg.version, '-V, --version')
    .addOption(new Option('--url <url>', 'gateway URL (env GATEWAY_URL)'))
    .addOption(new Option('--token <token>', 'management access token (env GATEWAY_TOKEN, which unlike a flag does not show in ps)'))
    .option('--json', 'print the exact JSON data of the answer (for scripts)')
    .configureHelp({ showGlobalOptions: true })
    // Commander's errors quote the argument given, which a script may have taken from another command's output: made
    // inert like every error. Each of its errors is one line too, its suggestion ("Did you mean …?") and the pointer
    // to --help included. With --json they go to stderr as well: the JSON error `main` prints is on stdout.
    .configureOutput({
      writeOut,
      writeErr: (s) => app.io.err(terminalText(s)),
      outputError: (s, write) => write(`${oneLine(s.trimEnd())} (add --help for usage)\n`),
    })
    // Settings above are inherited by every command created below via .command().
    .exitOverride()
    .addHelpText('after', ROOT_HELP);
  registerSession(program, app);
  registerProfile(program, app);
  registerPassword(program, app);
  registerReset(program, app);
  registerTwoFactor(program, app);
  registerAccessToken(program, app);
  registerLoginSession(program, app);
  registerChannel(program, app);
  registerUser(program, app);
  registerKey(program, app);
  registerPricing(program, app);
  registerGroup(program, app);
  registerLog(program, app);
  registerTopup(program, app);
  registerLedger(program, app);
  registerRedeem(program, app);
  registerBudget(program, app);
  registerOps(program, app);
  helpForBareGroups(program);
  return program;
}

/**
 * `gw` or `gw 2fa` alone prints that group's help on stdout and exits 0 (with --json: a usage error; commander would print it as an
 * error). Groups that run something themselves (`gw password`) keep their action.
 */
function helpForBareGroups(c: Command): void {
  for (const sub of c.commands) helpForBareGroups(sub);
  // commander keeps the action private; a group without one only dispatches to subcommands.
  if (c.commands.length === 0 || (c as unknown as { _actionHandler?: unknown })._actionHandler) return;
  c.allowExcessArguments(true).action(() => {
    if (c.args.length) c.error(`error: unknown command '${c.args[0]}'`, { code: 'commander.unknownCommand' });
    // A script asked for JSON and gave an incomplete command: help text is no answer it can parse.
    if (c.optsWithGlobals().json) {
      c.error(`error: missing subcommand: ${commandPath(c)} needs one of: ${c.commands.filter((s) => !(s as unknown as { _hidden?: boolean })._hidden).map((s) => s.name()).join(', ')}`,
        { code: 'commander.missingSubcommand', exitCode: EXIT.usage });
    }
    c.outputHelp();
  });
}

const commandPath = (c: Command): string => (c.parent ? `${commandPath(c.parent)} ${c.name()}` : c.name());

/** Runs the CLI on `argv` (without the runtime and script path) and returns the exit code. */
export async function main(argv: string[], io: Io): Promise<number> {
  // Whether the command already printed data: a stream (log export, metrics) cut by a failure cannot become one
  // JSON document any more, and its error then goes to stderr rather than into the middle of the data.
  let printed = false;
  const app = new App({ ...io, out: (t) => { printed = true; io.out(t); } });
  // Known before parsing, so even commander's own errors (unknown flag) come out as JSON.
  const end = argv.indexOf('--');
  const json = (end < 0 ? argv : argv.slice(0, end)).includes('--json');
  // With --json, --help and --version answer one JSON document too: their text is collected, not printed.
  let text = '';
  try {
    await buildProgram(app, json ? (s) => { text += s; } : undefined).parseAsync(argv, { from: 'user' });
    return app.code;
  } catch (e) {
    if (json && e instanceof CommanderError && e.exitCode === 0 && text) {
      io.out(`${jsonText(e.code === 'commander.version' ? { version: text.trim() } : { help: text })}\n`);
      return EXIT.ok;
    }
    return report(e, io, json && !printed);
  }
}

/** What a failure means for the operator: exit code, error code, message; `server` is the server's own object. */
interface Failure { exit: number; code: string; message: string; server?: Record<string, unknown>; extra?: Record<string, unknown> }

function classify(e: unknown): Failure {
  if (e instanceof CommanderError) return { exit: e.exitCode === 0 ? EXIT.ok : EXIT.usage, code: e.code, message: e.message.replace(/^error: /, '') };
  if (e instanceof UsageError) return { exit: EXIT.usage, code: 'usage_error', message: e.message };
  if (e instanceof ApiError) {
    return {
      exit: EXIT.refused, code: e.code, message: e.cliMessage ?? e.message, server: e.server,
      extra: { status: e.status, flag: e.flag, retry_after: e.retryAfter },
    };
  }
  if (e instanceof UnreachableError) return { exit: EXIT.unreachable, code: 'unreachable', message: e.message };
  if (e instanceof InterruptedError) return { exit: EXIT.interrupted, code: 'interrupted', message: 'interrupted' };
  // One line like every other error (the stack only with GW_DEBUG): an answer of an unexpected shape from whatever
  // serves the URL ends here, and a multi-line stack trace is neither a one-line error nor the operator's business.
  return { exit: EXIT.refused, code: 'internal_error', message: `unexpected failure: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}` };
}

/**
 * The failure for a person on stderr (one line), and with --json for the script on stdout: one JSON document, so
 * `out=$(gw … --json)` holds the data or the error, never both, and warnings printed before it (a loose config file,
 * plain http) stay out of what the script parses.
 */
function report(e: unknown, io: Io, json: boolean): number {
  const f = classify(e);
  if (f.exit === EXIT.ok) return f.exit;
  if (json) {
    // The server's object unchanged, plus the CLI's wording and exit code.
    const error = { message: f.message, code: f.code, ...f.server, ...f.extra, cli_message: f.message, exit_code: f.exit };
    io.out(`${jsonText({ error })}\n`);
  }
  if (e instanceof CommanderError) {
    // Commander has already printed its message itself.
  } else if (e instanceof InterruptedError) {
    io.err('\ninterrupted\n');
  } else {
    // The message may be the server's (or an upstream's) words: nothing in it may drive the terminal, nor add lines.
    io.err(`${oneLine(`error: ${f.message}${e instanceof ApiError ? ` (${f.code})` : ''}`)}\n`);
  }
  if (f.code === 'internal_error' && io.env.GW_DEBUG && e instanceof Error && e.stack) io.err(`${terminalText(e.stack)}\n`);
  return f.exit;
}
