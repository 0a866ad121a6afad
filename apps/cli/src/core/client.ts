/**
 * A small fetch-based client for the management API: sends JSON, unwraps the
 * `{success, message, data}` envelope and turns every failure into ApiError or UnreachableError.
 */
import { ApiError, UnreachableError, UsageError } from './errors';

export type Query = Record<string, string | number | boolean | undefined | null>;

export interface RequestOptions {
  query?: Query;
  body?: unknown;
  /** Extra headers (e.g. the session cookie during login). */
  headers?: Record<string, string>;
}

export interface RawResponse {
  status: number;
  headers: Headers;
  /** The parsed JSON body, or undefined when the body is not JSON. */
  body: any;
  /** The body as text (e.g. Prometheus metrics). */
  text: string;
}

export interface ApiClientOptions {
  /** Gateway origin, already normalised (no trailing slash). */
  url: string;
  /** Management access token sent as Bearer; absent for login. */
  token?: string;
  timeoutMs?: number;
}

/** Talks to one gateway with one credential. */
export class ApiClient {
  readonly url: string;
  private readonly token?: string;
  private readonly timeoutMs: number;

  constructor(opts: ApiClientOptions) {
    this.url = opts.url;
    this.token = opts.token;
    this.timeoutMs = opts.timeoutMs ?? 30_000;
  }

  /** Performs a request and returns the envelope's `data`; throws ApiError on any error answer. */
  async call<T = any>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const res = await this.raw(method, path, opts);
    return this.judged(opts, () => unwrap(res) as T);
  }

  /** Like `call` for a route answering plain text on success (`/metrics`); errors are still JSON. */
  async text(method: string, path: string, opts: RequestOptions = {}): Promise<string> {
    const res = await this.raw(method, path, opts);
    return this.judged(opts, () => (res.status >= 200 && res.status < 300 ? res.text : (unwrap(res), '')));
  }

  /**
   * A successful response whose body is left unread, for downloads streamed to a file or stdout; an error
   * answer throws like `call`. The timeout covers the response headers, not the download.
   */
  async stream(path: string, opts: RequestOptions = {}): Promise<Response> {
    const headers: Record<string, string> = { ...opts.headers };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), this.timeoutMs);
    let res: Response;
    try {
      res = await fetch(this.url + path + queryString(opts.query), { headers, signal: ctl.signal, redirect: 'manual' });
    } catch (e) {
      throw new UnreachableError(this.url, ctl.signal.aborted ? `no answer within ${this.timeoutMs} ms` : (e as Error).message || String(e));
    } finally {
      clearTimeout(timer);
    }
    if (res.status >= 200 && res.status < 300 && res.body) return res;
    const text = await boundedText(res, this.url);
    let body: unknown;
    try { body = text ? JSON.parse(text) : undefined; } catch { body = undefined; }
    return this.judged(opts, () => { unwrap({ status: res.status, headers: res.headers, body, text }); throw new Error('unreachable'); });
  }

  private judged<T>(opts: RequestOptions, read: () => T): T {
    try {
      return read();
    } catch (e) {
      // Lets the CLI tell "not logged in" apart from "these credentials were refused".
      if (e instanceof ApiError && !this.token && !opts.headers?.cookie) e.withoutCredentials = true;
      throw e;
    }
  }

  /** Performs a request and returns status, headers and parsed body without judging them. */
  async raw(method: string, path: string, opts: RequestOptions = {}): Promise<RawResponse> {
    const headers: Record<string, string> = { accept: 'application/json', ...opts.headers };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    if (opts.body !== undefined) headers['content-type'] = 'application/json';
    let res: Response;
    const signal = AbortSignal.timeout(this.timeoutMs);
    try {
      res = await fetch(this.url + path + queryString(opts.query), {
        method,
        headers,
        body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
        signal,
        redirect: 'manual',
      });
    } catch (e) {
      const err = e as Error & { code?: string };
      const reason = err.name === 'TimeoutError' ? `no answer within ${this.timeoutMs} ms`
        : err.code === 'ECONNREFUSED' ? 'connection refused'
        : err.code === 'ENOTFOUND' ? 'host not found'
        : err.message || String(err);
      throw new UnreachableError(this.url, reason);
    }
    const text = await boundedText(res, this.url, { signal, timeoutMs: this.timeoutMs });
    let body: unknown = undefined;
    try { body = text ? JSON.parse(text) : undefined; } catch { body = undefined; }
    return { status: res.status, headers: res.headers, body, text };
  }
}

/**
 * The chunks of a streamed body, each awaited at most `idleMs`: a server that stops sending in the middle of a
 * download ends it as unreachable (exit 3) instead of leaving a script waiting forever.
 */
export async function* bodyChunks(res: Response, url: string, idleMs: number): AsyncGenerator<Uint8Array> {
  const reader = res.body!.getReader();
  for (;;) {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const idle = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new UnreachableError(url, `the download stalled: no data for ${idleMs} ms`)), idleMs);
    });
    let r: Awaited<ReturnType<typeof reader.read>>;
    try {
      r = await Promise.race([reader.read(), idle]);
    } catch (e) {
      reader.cancel().catch(() => {});
      if (e instanceof UnreachableError) throw e;
      // The connection closed or was reset in the middle: the download is incomplete for a network reason (exit 3),
      // not a failure of the CLI itself (it was `unexpected failure: TypeError: ECONNRESET…`, exit 1).
      throw new UnreachableError(url, `the connection closed before the whole download arrived (${(e as Error)?.message || String(e)})`);
    } finally {
      clearTimeout(timer);
    }
    if (r.done) return;
    yield r.value;
  }
}

/** Most of an answer read into memory (a page of records or the metrics text is far smaller; downloads stream). */
export const MAX_ANSWER_BYTES = 64 * 1024 * 1024;

/**
 * The body as text, refused past MAX_ANSWER_BYTES: whatever answers at the URL could send gigabytes, and
 * the CLI would hold them all before judging the answer.
 */
async function boundedText(res: Response, url: string, timeout?: { signal: AbortSignal; timeoutMs: number }, limit = MAX_ANSWER_BYTES): Promise<string> {
  if (!res.body) return '';
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      size += r.value.length;
      if (size > limit) {
        reader.cancel().catch(() => {});
        throw new ApiError(res.status, 'answer_too_large', `the server at ${url} sent more than ${limit / 1024 / 1024} MiB; is this an AI gateway?`);
      }
      chunks.push(r.value);
    }
  } catch (e) {
    if (e instanceof ApiError) throw e;
    // Headers in time, then a body trickling past the timeout: no answer in time (exit 3), not "an unexpected answer".
    if (timeout?.signal.aborted) throw new UnreachableError(url, `no complete answer within ${timeout.timeoutMs} ms`);
    // The connection closed (or was reset) before the whole answer arrived: a network failure (exit 3), like the
    // timeout above. Before, it was judged by its status with an empty body: a 200 cut short was "unexpected answer
    // from the server; is this an AI gateway?" (exit 1), so a script retrying on exit 3 gave up, and `health` said
    // the gateway was unhealthy.
    throw new UnreachableError(url, `the connection closed before the whole answer arrived (${(e as Error)?.message || String(e)})`);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** Returns `data` of a success envelope, or throws the server's error as ApiError. */
export function unwrap(res: RawResponse): unknown {
  const b = res.body as any;
  if (res.status < 300 && b && typeof b === 'object' && b.success === true) return b.data ?? null;
  const e = b && typeof b === 'object' ? b.error : undefined;
  if (e && typeof e === 'object' && typeof e.message === 'string') {
    const err = new ApiError(res.status, String(e.code ?? ''), e.message, String(e.param ?? ''));
    err.server = e;
    const wait = Number(res.headers.get('retry-after'));
    if (res.headers.has('retry-after') && Number.isFinite(wait)) err.retryAfter = wait;
    throw err;
  }
  if (b && typeof b === 'object' && typeof b.message === 'string' && b.message) {
    throw new ApiError(res.status, `http_${res.status}`, b.message);
  }
  // Redirects are not followed (the token would go along); the usual one is http -> https, so name the target.
  const location = res.status >= 300 && res.status < 400 ? res.headers.get('location') : null;
  if (location) {
    throw new ApiError(res.status, `http_${res.status}`, `the server redirects to ${location.slice(0, 200)} (HTTP ${res.status}); redirects are not followed, so credentials go nowhere else: if that is your gateway, use its URL`);
  }
  // Not the gateway's JSON at all (a proxy page, a different service): say what came back.
  throw new ApiError(res.status, `http_${res.status}`, `unexpected answer from the server (HTTP ${res.status}); is this an AI gateway?`);
}

/**
 * A free-text argument (a model name, a trade number) as one URL path segment. Percent-encoding keeps `/`,
 * `?` and `#` inside the segment, but URL parsing still resolves `.` and `..` (also as `%2E`), and an empty
 * segment is the parent route: `gw pricing get .` would read the price list. Those are refused.
 */
export function pathSegment(value: string, what: string): string {
  if (value === '' || value === '.' || value === '..') {
    throw new UsageError(`${what} '${value}' cannot be named in a URL path (it would address another route)`);
  }
  return encodeURIComponent(value);
}

function queryString(q: Query | undefined): string {
  if (!q) return '';
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v === undefined || v === null || v === '') continue;
    p.set(k, String(v));
  }
  const s = p.toString();
  return s ? `?${s}` : '';
}
