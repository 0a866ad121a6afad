/**
 * Event-loop delay as the bench reads it: from the gateway's own /metrics
 * (gateway_event_loop_delay_seconds, on with LOOP_DELAY_SAMPLE_MS; each scrape starts a new window),
 * and from an idle probe process (loop-probe-proc.ts) on the same machine, whose delay is what the
 * machine's scheduling alone costs any process: the floor under the gateway's figure.
 */

/** Milliseconds; NaN when the window had no samples. */
export interface LoopWindow { p50: number; p99: number; p999: number; max: number }

/** Scrapes the gateway's loop delay (and so starts its next window). */
export async function scrapeGatewayLoop(url: string, adminToken: string): Promise<LoopWindow> {
  const text = await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${adminToken}` } })).text();
  const q = (quantile: string) => Number(new RegExp(`^gateway_event_loop_delay_seconds\\{quantile="${quantile}"\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN) * 1000;
  return { p50: q('0.5'), p99: q('0.99'), p999: q('0.999'), max: q('1') };
}

/**
 * Several windows of equal length folded into one figure: the mean of each quantile over the windows
 * (quantiles do not merge exactly; windows of the same load are alike enough) and the overall maximum.
 */
export function foldWindows(ws: LoopWindow[]): LoopWindow {
  const ok = ws.filter((w) => Number.isFinite(w.p50));
  const mean = (k: keyof LoopWindow) => ok.reduce((s, w) => s + w[k], 0) / ok.length;
  return { p50: mean('p50'), p99: mean('p99'), p999: mean('p999'), max: Math.max(...ok.map((w) => w.max)) };
}

/** Talks to a loop-probe-proc.ts child: `window()` returns its delay since the previous call. */
export class LoopProbe {
  private readonly reader;
  private buf = '';

  constructor(private readonly proc: Bun.Subprocess<'pipe', 'pipe', 'inherit'>) {
    this.reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  }

  static async start(sampleMs: number): Promise<LoopProbe> {
    const proc = Bun.spawn([process.execPath, `${import.meta.dir}/loop-probe-proc.ts`, String(sampleMs)], { stdin: 'pipe', stdout: 'pipe', stderr: 'inherit' });
    const p = new LoopProbe(proc);
    await p.line();
    return p;
  }

  private async line(): Promise<string> {
    while (!this.buf.includes('\n')) {
      const { done, value } = await this.reader.read();
      if (done) throw new Error('loop probe exited');
      this.buf += new TextDecoder().decode(value);
    }
    const i = this.buf.indexOf('\n');
    const l = this.buf.slice(0, i);
    this.buf = this.buf.slice(i + 1);
    return l;
  }

  async window(): Promise<LoopWindow> {
    this.proc.stdin.write('window\n');
    this.proc.stdin.flush();
    return JSON.parse(await this.line());
  }

  stop(): void {
    this.proc.kill('SIGTERM');
  }
}
