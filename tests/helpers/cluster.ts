/**
 * A cluster for tests: N real gateway processes (`bun run apps/server/src/index.ts`) on one fresh
 * PostgreSQL schema and one fresh Redis key prefix, started in parallel, with the same SECRET_KEY, so
 * "N nodes behave like one" is tested on the real multi-node wiring. Each node may get its own env
 * (e.g. its DATABASE_URL through a cuttable tcp-proxy). Rows are read directly with `sql` (search_path
 * set to the schema); every node's output is kept for assertions and failure messages.
 */
import { join } from 'node:path';
import postgres from 'postgres';
import { PG_TEST_URL, dropSchema, freshSchema } from './postgres';
import { REDIS_TEST_URL, dropPrefix, freshPrefix } from './redis';
import { callJson, loginToken } from './gateway-process';

const ROOT = join(import.meta.dir, '..', '..');
export const CLUSTER_ROOT_PASSWORD = 'cluster-root-pw-1';

export interface ClusterNode {
  index: number;
  url: string;
  proc: Bun.Subprocess<'ignore', 'pipe', 'pipe'>;
  /** Everything the process wrote (stdout and stderr), so far. */
  output(): string;
  /** kill -9, and wait until the process is gone. */
  kill9(): Promise<void>;
  /** SIGTERM (a graceful stop); the process's exit is the test's doing, not reported as dying on its own. */
  terminate(): void;
}

export interface Cluster {
  nodes: ClusterNode[];
  schema: string;
  prefix: string;
  /** SQL on the cluster's schema (unqualified table names). */
  sql: postgres.Sql;
  /** A management token of the root user (tokens live in the database: valid on every node). */
  rootToken: string;
  api(node: number, method: string, path: string, body?: unknown, token?: string | null): Promise<{ status: number; body: any; headers: Headers }>;
  /** Starts node `i` again (same env) after it died; replaces `nodes[i]`. */
  restart(i: number): Promise<ClusterNode>;
  stop(): Promise<void>;
}

export interface ClusterOptions {
  nodes?: number;
  /** Env of every node (on top of the cluster's own). */
  env?: Record<string, string>;
  /** Env of node i only (e.g. DATABASE_URL through a proxy). */
  nodeEnv?: (i: number) => Record<string, string>;
  /** Default true: ROOT_PASSWORD=CLUSTER_ROOT_PASSWORD. False: nodes generate one (bootstrap tests). */
  rootPassword?: boolean;
}

/** Starts one gateway process and waits for its `listening` line, text or JSON (PORT=0: it reports the real port). */
export async function spawnNode(index: number, env: Record<string, string>, onLogLine?: (line: string) => void): Promise<ClusterNode> {
  const proc = Bun.spawn([process.execPath, 'run', 'apps/server/src/index.ts'], { cwd: ROOT, env: { ...process.env, ...env }, stdout: 'pipe', stderr: 'pipe', stdin: 'ignore' });
  let out = '';
  // Both pipes drained for the process's life: a chatty node never blocks on a full pipe.
  for (const stream of [proc.stdout, proc.stderr]) {
    void (async () => {
      const dec = new TextDecoder();
      let partial = '';
      try {
        for await (const c of stream) {
          const text = dec.decode(c, { stream: true });
          out += text;
          if (!onLogLine) continue;
          const lines = (partial + text).split('\n');
          partial = lines.pop()!;
          for (const line of lines) if (line) onLogLine(line);
        }
      } catch { /* gone */ }
    })();
  }
  // A node that dies on its own shows up in a test only as ECONNREFUSED: say so, with its last words.
  let killedByTest = false;
  void proc.exited.then(async (code) => {
    if (killedByTest) return;
    await Bun.sleep(100); // the pipes' last chunks
    console.error(`cluster node ${index} (pid ${proc.pid}) exited on its own: code ${code}, signal ${proc.signalCode ?? 'none'}; its last output:\n${out.slice(-4000)}`);
  });
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    // Text or JSON log format (LOG_FORMAT).
    const m = /listening url=(https?:\/\/[^\s]+)/.exec(out) ?? /"event":"listening","url":"(https?:\/\/[^"]+)"/.exec(out);
    if (m) {
      return {
        index, url: m[1]!, proc, output: () => out,
        async kill9() { killedByTest = true; proc.kill(9); await proc.exited; },
        terminate() { killedByTest = true; proc.kill('SIGTERM'); },
      };
    }
    if (proc.exitCode !== null) break;
    await Bun.sleep(20);
  }
  killedByTest = true;
  proc.kill(9);
  throw new Error(`node ${index} did not start (exit ${proc.exitCode}):\n${out}`);
}

export async function startCluster(opts: ClusterOptions = {}): Promise<Cluster> {
  const n = opts.nodes ?? 3;
  const schema = freshSchema('gwcluster');
  const prefix = freshPrefix('cluster');
  const secret = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('hex');
  const envOf = (i: number): Record<string, string> => ({
    PORT: '0', HOST: '127.0.0.1', DATABASE_URL: PG_TEST_URL, PG_SCHEMA: schema, REDIS_URL: REDIS_TEST_URL, REDIS_PREFIX: prefix,
    SECRET_KEY: secret, LOGIN_IP_PER_MINUTE: '1000', PASSWORD_HASH_QUEUE: '10000', PASSWORD_CHECKS_PER_MINUTE: '10000', LOG_LEVEL: 'info',
    ...(opts.rootPassword === false ? {} : { ROOT_PASSWORD: CLUSTER_ROOT_PASSWORD }),
    ...opts.env, ...opts.nodeEnv?.(i),
  });
  // No epoch is set up here: a fresh schema's first start opens it at once (migration 0013), as in production.
  const started = await Promise.allSettled(Array.from({ length: n }, (_, i) => spawnNode(i, envOf(i))));
  const nodes = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const sql = postgres(PG_TEST_URL, { max: 4, onnotice: () => {}, connection: { search_path: schema } });
  const stop = async () => {
    await Promise.all(nodes.map((nd) => nd.kill9()));
    await sql.end({ timeout: 1 }).catch(() => {});
    await dropSchema(schema).catch(() => {});
    await dropPrefix(prefix).catch(() => {});
  };
  const failed = started.find((s) => s.status === 'rejected') as PromiseRejectedResult | undefined;
  if (failed) {
    await stop();
    throw failed.reason;
  }
  const rootToken = opts.rootPassword === false ? '' : await loginToken(nodes[0]!.url, 'root', CLUSTER_ROOT_PASSWORD);
  return {
    nodes, schema, prefix, sql, rootToken,
    api: (i, method, path, body, token = rootToken) => callJson(nodes[i]!.url, method, path, body, token ?? undefined),
    async restart(i) {
      const node = await spawnNode(i, envOf(i));
      nodes[i] = node;
      return node;
    },
    stop,
  };
}

/** Polls `check` every 20 ms until it returns true; returns the time it took (ms), or throws after `ms`. */
export async function within(what: string, ms: number, check: () => Promise<boolean> | boolean): Promise<number> {
  const t0 = performance.now();
  for (;;) {
    if (await check()) return performance.now() - t0;
    if (performance.now() - t0 > ms) throw new Error(`not within ${ms} ms: ${what}`);
    await Bun.sleep(20);
  }
}
