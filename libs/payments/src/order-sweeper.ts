/**
 * Runs TopupService.failUnstarted on the leader (one node of a cluster; every SQLite process leads): once at once,
 * so a restart after a crash settles that crash's orders, then every half deadline (at most a minute), so an
 * order's status is final at most 1.5 deadlines after its creation. The sweep is one guarded UPDATE per
 * provider, so an overlap of two leaders (see Leader) closes each order once.
 */
import { errorText, everyWhileLeader, nowSeconds, type Leader, type Logger } from '@gw/core';
import type { TopupService } from './topup-service';

export function startOrderSweeper(topups: TopupService, deadlineSeconds: number, leader: Leader, log: Logger): () => void {
  const sweep = async () => {
    const failed = await topups.failUnstarted(nowSeconds());
    if (failed.length) log.warn('topup.unstarted_failed', { count: failed.length, trade_nos: failed.slice(0, 20).join(','), msg: 'orders that never got a checkout were marked failed' });
  };
  const onError = (err: unknown) => log.error('topup.sweep_failed', { cause: errorText(err) });
  if (leader.isLeader) void sweep().catch(onError);
  return everyWhileLeader(leader, Math.min(60_000, Math.max(1000, deadlineSeconds * 500)), sweep, onError);
}
