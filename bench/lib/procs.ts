/** Child processes of the benches: spawn one that prints a JSON line first, and read its CPU time. */
import { readFileSync } from 'node:fs';

/** Starts `bun <args>` in `cwd` and returns it with the JSON object of its first stdout line. */
export async function spawnJson(args: string[], cwd: string, env: Record<string, string> = {}): Promise<{ proc: ReturnType<typeof Bun.spawn>; info: any }> {
  const proc = Bun.spawn([process.execPath, ...args], { cwd, env: { ...process.env, ...env }, stdout: 'pipe', stderr: 'inherit' });
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
