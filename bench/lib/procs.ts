/** Child processes of the benches: spawn one that prints a JSON line first, and read its CPU time. */
import { readFileSync, realpathSync } from 'node:fs';
import { join } from 'node:path';

/** Starts `bun <args>` in `cwd` and returns it with the JSON object of its first stdout line (stderr to `stderrFile` if given). */
export async function spawnJson(args: string[], cwd: string, env: Record<string, string> = {}, stderrFile?: string): Promise<{ proc: ReturnType<typeof Bun.spawn>; info: any }> {
  const proc = Bun.spawn([process.execPath, ...args], { cwd, env: { ...process.env, ...env }, stdout: 'pipe', stderr: stderrFile ? Bun.file(stderrFile) : 'inherit' });
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  let text = '';
  while (!text.includes('\n')) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`${args.join(' ')} exited before printing its address`);
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return { proc, info: JSON.parse(text.split('\n')[0]!) };
}

/** CPU seconds (user + system) a process has used so far. */
export function cpuSeconds(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

/**
 * Refuses a checkout whose workspace packages (@gw/*) resolve to another tree: a worktree given a link to
 * this checkout's node_modules would import this checkout's libs and measure them twice, silently.
 */
export function ownPackages(checkout: string): string {
  const resolved = realpathSync(join(checkout, 'node_modules/@gw/core'));
  if (resolved !== realpathSync(join(checkout, 'libs/core'))) {
    throw new Error(`${checkout}: @gw/core resolves to ${resolved}, not to this checkout's libs/core; give it its own node_modules (bun install) so it measures its own code`);
  }
  return checkout;
}
