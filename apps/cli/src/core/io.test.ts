import { describe, expect, test } from 'bun:test';
import { EventEmitter } from 'node:events';
import { InterruptedError } from './errors';
import { readLineRaw, type RawInput } from './io';

/** A fake TTY stdin that records raw-mode changes. */
function fakeTty() {
  const em = new EventEmitter();
  const state = { raw: false, paused: true, out: '' };
  const input: RawInput = {
    setRawMode: (on) => { state.raw = on; },
    setEncoding: () => undefined,
    resume: () => { state.paused = false; },
    pause: () => { state.paused = true; },
    on: (ev, fn) => em.on(ev, fn),
    off: (ev, fn) => em.off(ev, fn),
  };
  return { input, state, type: (s: string) => em.emit('data', s), write: (t: string) => { state.out += t; } };
}

describe('readLineRaw', () => {
  test('a hidden answer is never echoed; backspace edits; raw mode is restored', async () => {
    const t = fakeTty();
    const p = readLineRaw(t.input, t.write, 'Password: ', true);
    expect(t.state.raw).toBe(true);
    t.type('s3cr');
    t.type('x\u007f');
    t.type('et\r');
    expect(await p).toBe('s3cret');
    expect(t.state.out).toBe('Password: \n');
    expect(t.state).toMatchObject({ raw: false, paused: true });
  });

  test('a visible answer is echoed; escape sequences are ignored', async () => {
    const t = fakeTty();
    const p = readLineRaw(t.input, t.write, 'Code: ');
    t.type('12');
    t.type('\u001b[A');
    t.type('34\n');
    expect(await p).toBe('1234');
    expect(t.state.out).toBe('Code: 1234\n');
  });

  test('Ctrl-C interrupts and restores the terminal', async () => {
    const t = fakeTty();
    const p = readLineRaw(t.input, t.write, 'Password: ', true);
    t.type('abc\u0003');
    await expect(p).rejects.toBeInstanceOf(InterruptedError);
    expect(t.state.raw).toBe(false);
  });
});
