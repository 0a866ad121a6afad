/**
 * A real gateway process (`bun run apps/server/src/index.ts`) for durability tests that kill it.
 * In-process gateways (gateway.ts) cannot be killed without killing the test.
 */
import { join } from 'node:path';

const ROOT = join(import.meta.dir, '..', '..');

export interface GatewayProcess {
  proc: Bun.Subprocess<'ignore', 'pipe', 'pipe'>;
  url: string;
}

/** Starts the gateway and waits for its `listening url=…` log line (PORT=0: it reports the real port). */
export async function startGatewayProcess(env: Record<string, string | undefined>, track?: Set<Bun.Subprocess>): Promise<GatewayProcess> {
  const proc = Bun.spawn([process.execPath, 'run', 'apps/server/src/index.ts'], { cwd: ROOT, env: { ...process.env, ...env }, stdout: 'pipe', stderr: 'pipe', stdin: 'ignore' });
  track?.add(proc);
  const reader = proc.stdout.getReader();
  const dec = new TextDecoder();
  let out = '';
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    const { done, value } = await Promise.race([reader.read(), Bun.sleep(15_000).then(() => ({ done: true, value: undefined }))]);
    if (done) break;
    out += dec.decode(value);
    const m = /listening url=(https?:\/\/[^\s]+)/.exec(out);
    if (m) {
      reader.releaseLock();
      // Keep draining so a chatty process never blocks on a full pipe.
      void proc.stdout.pipeTo(new WritableStream());
      return { proc, url: m[1]! };
    }
  }
  proc.kill(9);
  throw new Error(`gateway did not start: ${out} ${await new Response(proc.stderr).text()}`);
}

/** A JSON call with an optional Bearer token. */
export async function callJson(url: string, method: string, path: string, body?: unknown, token?: string, headers: Record<string, string> = {}) {
  const res = await fetch(url + path, {
    method,
    headers: { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...(token ? { authorization: `Bearer ${token}` } : {}), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: any = text;
  try { parsed = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, body: parsed, headers: res.headers };
}

/** Logs in as `username` and returns a management access token. */
export async function loginToken(url: string, username: string, password: string): Promise<string> {
  const login = await fetch(`${url}/api/user/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password }) });
  if (login.status !== 200) throw new Error(`login failed: ${login.status}`);
  const cookie = login.headers.get('set-cookie')!.split(';')[0]!;
  const tok = await fetch(`${url}/api/user/access_token`, { method: 'POST', headers: { 'content-type': 'application/json', cookie }, body: JSON.stringify({ name: 'test', current_password: password }) });
  return ((await tok.json()) as any).data.token as string;
}
