/**
 * Runs the CLI as a real subprocess (as operators and scripts do) with an isolated config file,
 * and collects its exit code and output.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const ROOT = resolve(import.meta.dir, '../..');
const ENTRY = join(ROOT, 'apps/cli/src/index.ts');

export interface CliResult { code: number; stdout: string; stderr: string }

/** A sandbox: its own HOME and GW_CONFIG so tests never touch a real user's config. */
export interface CliSandbox {
  dir: string;
  configPath: string;
  run(args: string[], opts?: { stdin?: string; env?: Record<string, string> }): Promise<CliResult>;
  cleanup(): void;
}

export function cliSandbox(): CliSandbox {
  const dir = mkdtempSync(join(tmpdir(), 'gw-cli-'));
  const configPath = join(dir, 'cfg', 'config.json');
  return {
    dir, configPath,
    async run(args, opts = {}) {
      const proc = Bun.spawn(['bun', 'run', ENTRY, ...args], {
        cwd: ROOT,
        // A clean environment: no GATEWAY_* from the developer's shell leaks into a test.
        env: { PATH: process.env.PATH ?? '', HOME: dir, GW_CONFIG: configPath, NO_COLOR: '1', ...opts.env },
        stdin: opts.stdin === undefined ? 'ignore' : new TextEncoder().encode(opts.stdin),
        stdout: 'pipe',
        stderr: 'pipe',
      });
      const timer = setTimeout(() => proc.kill(), 10_000);
      const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
      clearTimeout(timer);
      return { code, stdout, stderr };
    },
    cleanup() { rmSync(dir, { recursive: true, force: true }); },
  };
}
