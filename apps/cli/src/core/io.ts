/**
 * Terminal I/O behind one interface so commands never touch `process` directly: output streams,
 * environment, reading stdin, and prompts (with echo off for secrets).
 */
import { EXIT, InterruptedError } from './errors';
import type { Env } from './config';

export interface Io {
  env: Env;
  out(text: string): void;
  err(text: string): void;
  /** True when stdin is an interactive terminal (prompts are possible). */
  interactive: boolean;
  /** True when stdout is a terminal: data printed "as served" is then made inert like every other output. */
  outIsTerminal?: boolean;
  /** Resolves once stdout has taken what was written (a stream to a slow reader waits here instead of piling up). */
  drained?(): Promise<void>;
  /** The whole of stdin as text. */
  readStdin(): Promise<string>;
  /** Asks on stderr and reads one line from the terminal; `hidden` turns echo off. */
  prompt(question: string, hidden?: boolean): Promise<string>;
}

/**
 * The real process's I/O. Stdout closed by its reader (`gw log export | head`) ends the process with 141, as SIGPIPE
 * would: the write errors were ignored, so an export went on downloading (and buffering) to the end of the data.
 */
export function processIo(): Io {
  let blocked: Promise<void> | undefined;
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE') process.exit(EXIT.brokenPipe);
    throw e;
  });
  return {
    env: process.env,
    out: (t) => {
      if (!process.stdout.write(t)) blocked ??= new Promise((r) => process.stdout.once('drain', () => { blocked = undefined; r(); }));
    },
    drained: () => blocked ?? Promise.resolve(),
    err: (t) => { process.stderr.write(t); },
    interactive: Boolean(process.stdin.isTTY),
    outIsTerminal: Boolean(process.stdout.isTTY),
    readStdin: () => Bun.stdin.text(),
    prompt: ttyPrompt,
  };
}

/** The part of a TTY stdin the prompt needs (process.stdin, or a fake in tests). */
export interface RawInput {
  setRawMode(on: boolean): unknown;
  setEncoding(enc: 'utf8'): unknown;
  resume(): unknown;
  pause(): unknown;
  on(ev: 'data', fn: (chunk: string) => void): unknown;
  off(ev: 'data', fn: (chunk: string) => void): unknown;
}

function ttyPrompt(question: string, hidden = false): Promise<string> {
  return readLineRaw(process.stdin as unknown as RawInput, (t) => { process.stderr.write(t); }, question, hidden);
}

/**
 * Reads a line in raw mode so a hidden answer is never echoed (nor left in the scrollback).
 * Handles backspace, Ctrl-C (interrupt) and Ctrl-D (end of input); escape sequences are ignored.
 */
export function readLineRaw(input: RawInput, write: (t: string) => void, question: string, hidden = false): Promise<string> {
  // Raw mode before the question: whatever is typed after seeing it must never be echoed.
  input.setRawMode(true);
  input.setEncoding('utf8');
  input.resume();
  write(question);
  return new Promise((resolve, reject) => {
    let answer = '';
    const finish = () => {
      input.off('data', onData);
      input.setRawMode(false);
      input.pause();
      write('\n');
    };
    const onData = (chunk: string) => {
      if (chunk.startsWith('\u001b')) return; // arrow/function keys: escape sequences, not input
      for (const ch of chunk) {
        if (ch === '\r' || ch === '\n' || (ch === '\u0004' && answer)) { finish(); resolve(answer); return; }
        if (ch === '\u0003' || ch === '\u0004') { finish(); reject(new InterruptedError()); return; }
        if (ch === '\u007f' || ch === '\b') {
          if (answer && !hidden) write('\b \b');
          answer = [...answer].slice(0, -1).join('');
          continue;
        }
        if (ch < ' ') continue; // other control keys
        answer += ch;
        if (!hidden) write(ch);
      }
    };
    input.on('data', onData);
  });
}
