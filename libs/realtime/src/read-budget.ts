/**
 * How many bytes of frames one session may have the gateway read per second, per direction: a token bucket whose
 * tokens may go negative. A frame always takes its bytes at once; when that leaves a debt, the caller holds the frame
 * (and everything behind it) for the returned wait, after which the debt is paid. Frames are read one at a time, so a
 * session owes at most one frame, and a session that reads within its rate never waits.
 */
export class ReadBudget {
  private tokens: number;
  private at: number;

  /** `perSecond` 0 = unlimited; `burst`: the most an idle session has saved up (at least its largest frame). */
  constructor(private readonly perSecond: number, private readonly burst: number, private readonly now: () => number = () => performance.now()) {
    this.tokens = burst;
    this.at = now();
  }

  /** Takes `bytes`; returns 0 when the frame may be read now, else the milliseconds to hold it first. */
  take(bytes: number): number {
    if (this.perSecond <= 0 || bytes <= 0) return 0;
    const t = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((t - this.at) * this.perSecond) / 1000);
    this.at = t;
    this.tokens -= bytes;
    return this.tokens >= 0 ? 0 : Math.ceil((-this.tokens * 1000) / this.perSecond);
  }
}
