/** The upstream double and a gateway in front of it, as subprocesses (bench/realtime.ts's `--upstream` and `--gateway` roles). */

interface Role { proc: ReturnType<typeof Bun.spawn>; info: any }

async function spawnRole(benchDir: string, args: string[]): Promise<Role> {
  const proc = Bun.spawn(['bun', `${benchDir}/realtime.ts`, ...args], { cwd: `${benchDir}/..`, stdout: 'pipe', stderr: 'inherit', env: process.env });
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  let text = '';
  while (!text.includes('\n')) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`bench role ${args[0]} exited before printing its address`);
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return { proc, info: JSON.parse(text.split('\n')[0]!) };
}

/** `gateway`: its base URL and a funded API key; `stop()` ends both processes. */
export async function spawnRealtimeRoles(benchDir: string): Promise<{ upstream: { url: string }; gateway: { url: string; key: string }; stop(): Promise<void> }> {
  const upstream = await spawnRole(benchDir, ['--upstream']);
  const gateway = await spawnRole(benchDir, ['--gateway', upstream.info.url]);
  return {
    upstream: upstream.info, gateway: gateway.info,
    async stop() {
      gateway.proc.kill('SIGTERM');
      upstream.proc.kill('SIGTERM');
      await Promise.all([gateway.proc.exited, upstream.proc.exited]);
    },
  };
}
