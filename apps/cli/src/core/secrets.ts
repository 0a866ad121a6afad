/**
 * Reading a password the one way every command does: `--password-stdin` (first line of stdin), a
 * visible `--password` where a command offers it, or a prompt with echo off on a terminal.
 */
import type { Ctx } from './context';
import { UsageError } from './errors';

export interface SecretSource {
  /** `--password-stdin` was given. */
  stdin?: boolean;
  /** `--json-body -` was given: it wants stdin too. */
  jsonBodyFromStdin?: boolean;
  /** A value from the command line (`--password`), for commands that have that flag. */
  value?: string;
  /** The question on a terminal; no prompt without it. */
  prompt?: string;
  /** Ask twice and compare (a new password). */
  confirm?: boolean;
  /** Refuse to go on without one, with this hint off a terminal; otherwise undefined means "none given". */
  required?: string;
}

/** The secret, or undefined when none was given and none is required. */
export async function readSecret(ctx: Ctx, s: SecretSource): Promise<string | undefined> {
  if (s.stdin && s.value !== undefined) throw new UsageError('use either --password-stdin or --password, not both');
  if (s.stdin && s.jsonBodyFromStdin) throw new UsageError('--password-stdin and --json-body - both want stdin; use a file for --json-body');
  if (s.stdin) {
    const line = (await ctx.io.readStdin()).split(/\r?\n/)[0];
    if (!line) throw new UsageError('--password-stdin: the first line of stdin is empty');
    return line;
  }
  if (s.value !== undefined) {
    if (!s.value && s.required) throw new UsageError('empty password');
    return s.value || undefined;
  }
  if (s.prompt && ctx.io.interactive) {
    const answer = await ctx.io.prompt(s.prompt, true);
    if (!answer) {
      if (s.required) throw new UsageError('empty password');
      return undefined;
    }
    if (s.confirm && answer !== await ctx.io.prompt('Repeat password: ', true)) throw new UsageError('the passwords do not match');
    return answer;
  }
  if (s.required) throw new UsageError(s.required);
  return undefined;
}

/** The caller's current password for a command that must re-authenticate: `--password-stdin`, else the prompt, else a usage error. */
export async function readCurrentPassword(ctx: Ctx, passwordStdin: boolean | undefined): Promise<string> {
  return (await readSecret(ctx, {
    stdin: passwordStdin, prompt: 'Current password: ',
    required: 'no password: stdin is not a terminal; use --password-stdin (your current password on the first line)',
  }))!;
}
