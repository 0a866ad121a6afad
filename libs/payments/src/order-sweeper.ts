/**
 * Runs TopupService.sweep on the leader (one node of a cluster; every SQLite process leads): once at once when it
 * starts leading, so a restart after a crash (or a new leader after the old one's) settles that crash's orders,
 * then every half checkout deadline (at most a minute), so an order's status is final at most half a minute after
 * its deadline or expiry. Each sweep is one guarded UPDATE per provider and kind, so an overlap of two leaders (see
 * Leader) closes each order once.
 */
import { errorText, everyWhileLeader, nowSeconds, type Leader, type Logger } from '@gw/core';
import type { TopupService } from './topup-service';

export function startOrderSweeper(topups: TopupService, deadlineSeconds: number, leader: Leader, log: Logger): () => Promise<void> {
  const sweep = async () => {
    const { unstarted, stale, orphaned } = await topups.sweep(nowSeconds());
    if (unstarted.length) log.warn('topup.unstarted_failed', { count: unstarted.length, trade_nos: unstarted.slice(0, 20).join(','), msg: 'orders that never got a checkout were marked failed' });
    if (stale.length) log.info('topup.pending_expired', { count: stale.length, trade_nos: stale.slice(0, 20).join(','), msg: 'orders whose checkout was not paid within TOPUP_PENDING_EXPIRY_SECONDS were marked expired' });
    for (const provider of new Set(orphaned.map((o) => o.provider))) {
      const trades = orphaned.filter((o) => o.provider === provider).map((o) => o.tradeNo);
      log.warn('topup.provider_removed_expired', { provider, count: trades.length, trade_nos: trades.slice(0, 20).join(','), msg: `pending orders of ${provider}, which is no longer configured, were marked expired` });
    }
  };
  return everyWhileLeader(leader, Math.min(60_000, Math.max(1000, deadlineSeconds * 500)), sweep, {
    atOnce: true, onError: (err) => log.error('topup.sweep_failed', { cause: errorText(err) }),
  });
}
