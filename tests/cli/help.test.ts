/**
 * In-process checks of the command tree (no server, no subprocess): every command documents an
 * example, and argument errors map to exit code 2 before any request is made.
 */
import { describe, expect, test } from 'bun:test';
import type { Command } from 'commander';
import { buildProgram, main } from '../../apps/cli/src/main';
import { App } from '../../apps/cli/src/core/context';
import type { Io } from '../../apps/cli/src/core/io';

function fakeIo(env: Record<string, string> = {}): Io & { stdout: string; stderr: string } {
  const io = {
    env, stdout: '', stderr: '', interactive: false,
    out(t: string) { io.stdout += t; },
    err(t: string) { io.stderr += t; },
    readStdin: async () => '',
    prompt: async () => { throw new Error('no prompts in tests'); },
  };
  return io;
}

function paths(cmd: Command, prefix: string[] = []): string[][] {
  return cmd.commands.filter((c) => c.name() !== 'help').flatMap((c) => [[...prefix, c.name()], ...paths(c, [...prefix, c.name()])]);
}

describe('gw command tree', () => {
  const all = paths(buildProgram(new App(fakeIo())));

  test('has every command group', () => {
    const names = all.map((p) => p.join(' '));
    for (const n of ['login', 'logout', 'whoami', 'access-token create', 'token create', '2fa setup', '2fa backup-codes', 'profile update',
      'password reset-request', 'password reset', 'health', 'metrics', 'channel list', 'channel batch-delete', 'channel enable-tag',
      'channel disable-tag', 'channel test', 'user enable', 'key create', 'key delete', 'pricing set', 'log list', 'topup create',
      'ledger adjust']) expect(names).toContain(n);
  });

  test('--help on every command exits 0 and shows an example', async () => {
    for (const p of [[], ...all]) {
      const io = fakeIo();
      expect(await main([...p, '--help'], io)).toBe(0);
      expect(io.stdout).toContain('Example');
      expect(io.stdout).toMatch(/\n  \$ .*\bgw /);
    }
  });

  test('bad values are usage errors (2) before any network access', async () => {
    const env = { GATEWAY_URL: 'http://127.0.0.1:9', GATEWAY_TOKEN: 'gwm_x' };
    const cases: [string[], string][] = [
      [['ledger', 'adjust', '--amount', '5'], "required option '--user-id <id>' not specified"],
      [['ledger', 'adjust', '--user-id', '1', '--amount', '1.5'], 'expected an integer'],
      [['channel', 'create', '--model-mapping', '{nope'], 'expected JSON'],
      [['channel', 'update', '3'], 'nothing to update'],
      [['channel', 'list', '--status', '0'], 'expected a positive id'],
      [['key', 'update', '3', '--unlimited-quota', 'maybe'], 'expected true or false'],
      [['log', 'list', '--from', 'yesterday-ish'], 'expected unix seconds or an ISO date'],
      [['user', 'create', '--username', 'x'], 'missing required --password'],
      [['whoami', '--url', 'ftp://x'], 'only http and https'],
    ];
    for (const [argv, msg] of cases) {
      const io = fakeIo(env);
      expect(await main(argv, io)).toBe(2);
      expect(io.stderr).toContain(msg);
    }
  });

  test('a negative amount is a value, not a flag', async () => {
    // Reaches the network step (exit 3 on the closed port) instead of failing to parse.
    const io = fakeIo({ GATEWAY_URL: 'http://127.0.0.1:9', GATEWAY_TOKEN: 'gwm_x' });
    expect(await main(['ledger', 'adjust', '--user-id', '1', '--amount', '-500', '--note', 'n'], io)).toBe(3);
    expect(io.stderr).toContain('cannot reach the gateway');
  });
});
