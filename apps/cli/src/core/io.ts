/**
 * Terminal I/O behind one interface so commands never touch `process` directly: output streams,
 * environment, reading stdin, and prompts (with echo off for secrets).
 */
import { InterruptedError } from './errors';
import type { Env } from './config';

export interface Io {
  env: Env;
  out(text: string): void;
  err(text: string): void;
  /** True when stdin is an interactive terminal (prompts are possible). */
  interactive: boolean;
  /** The whole of stdin as text. */
  readStdin(): Promise<string>;
  /** Asks on stderr and reads one line from the terminal; `hidden` turns echo off. */
  prompt(question: string, hidden?: boolean): Promise<string>;
}

/** The real process's I/O. */
export function processIo(): Io {
  return {
    env: process.env,
    out: (t) => { process.stdout.write(t); },
    err: (t) => { process.stderr.write(t); },
    interactive: Boolean(process.stdin.isTTY),
    readStdin: () => Bun.stdin.text(),
    prompt: ttyPrompt,
  };
}

/**
 * Reads a line in raw mode so a hidden answer is never echoed (nor left in the scrollback).
 * Handles backspace, Ctrl-C (interrupt) and Ctrl-D (end of input).
 */
function ttyPrompt(question: string, hidden = false): Promise<string> {
  const stdin = process.stdin;
  process.stderr.write(question);
  stdin.setRawMode(true);
  stdin.setEncoding('utf8');
  stdin.resume();
  return new Promise((resolve, reject) => {
    let answer = '';
    const finish = () => {
      stdin.off('data', onData);
      stdin.setRawMode(false);
      stdin.pause();
      process.stderr.write('\n');
    };
    const onData = (chunk: string) => {
      if (chunk.startsWith('\u001b')) return; // arrow/function keys: escape sequences, not input
      for (const ch of chunk) {
        if (ch === '\r' || ch === '\n' || (ch === '\u0004' && answer)) { finish(); resolve(answer); return; }
        if (ch === '\u0003' || ch === '\u0004') { finish(); reject(new InterruptedError()); return; }
        if (ch === '\u007f' || ch === '\b') {
          if (answer && !hidden) process.stderr.write('\b \b');
          answer = [...answer].slice(0, -1).join('');
          continue;
        }
        if (ch < ' ') continue; // other control keys (arrows send escape sequences) are ignored
        answer += ch;
        if (!hidden) process.stderr.write(ch);
      }
    };
    stdin.on('data', onData);
  });
}
