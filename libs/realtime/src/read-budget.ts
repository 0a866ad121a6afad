/**
 * How many bytes of frames one session may have the gateway read per second, per direction: a token bucket whose
 * tokens may go negative. A frame always takes its bytes at once; when that leaves a debt, the caller holds the frame
 * (and everything behind it) for the returned wait, after which the debt is paid. Frames are read one at a time, so a
 * session owes at most one frame, and a session that reads within its rate never waits.
 */
/**
 * The least a frame costs of a budget, whatever its size: every frame is a handler call, a parse and a send for the
 * gateway. Counted in bytes alone, a client's 2-byte frames passed two million a second through a 4 MiB budget, and
 * one session's flood held every other request of the process for seconds. Real clients and upstreams send audio
 * chunks and deltas of a few KiB at most tens a second, far from it.
 */
export const FRAME_COST_BYTES = 1024;

/** What one frame of `bytes` takes of a budget and of a session's buffered-bytes bounds. */
export const frameCost = (bytes: number) => Math.max(bytes, FRAME_COST_BYTES);

export class ReadBudget {
  private tokens: number;
  private at: number;

  /** `perSecond` 0 = unlimited; `burst`: the most an idle session has saved up (at least its largest frame). */
  constructor(private readonly perSecond: number, private readonly burst: number, private readonly now: () => number = () => performance.now()) {
    this.tokens = burst;
    this.at = now();
  }

  /** Takes a frame of `bytes` (at least FRAME_COST_BYTES); returns 0 when it may be read now, else the milliseconds to hold it first. */
  take(bytes: number): number {
    if (this.perSecond <= 0) return 0;
    bytes = frameCost(bytes);
    const t = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((t - this.at) * this.perSecond) / 1000);
    this.at = t;
    this.tokens -= bytes;
    return this.tokens >= 0 ? 0 : Math.ceil((-this.tokens * 1000) / this.perSecond);
  }
}
