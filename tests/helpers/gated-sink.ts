import type { AsyncSettlementSink, SettleOutcome, SettlementRow, SettlementsRepo } from '@gw/db';

/**
 * A durable (asynchronous) settlement sink over the real SQLite tables that commits only while the test's
 * gate is open, so "not acknowledged before the commit" can be observed; counts what waits, and
 * `failNext` makes the next commit fail with nothing written.
 */
export class GatedSink implements AsyncSettlementSink {
  waiting = 0;
  failNext = false;
  private gate: Promise<void> = Promise.resolve();
  private open: () => void = () => {};
  constructor(private readonly repo: SettlementsRepo) {}
  close() { this.gate = new Promise((ok) => { this.open = ok; }); }
  release() { this.open(); this.gate = Promise.resolve(); }
  async balances() { return this.repo.balances(); }
  async balance(id: number) { return this.repo.balance(id); }
  async settle(row: SettlementRow): Promise<SettleOutcome> {
    this.waiting++;
    await this.gate;
    this.waiting--;
    if (this.failNext) {
      this.failNext = false;
      throw new Error('database unreachable (test)');
    }
    let out!: SettleOutcome;
    this.repo.transaction(() => { out = this.repo.apply(row); });
    return out;
  }
}
