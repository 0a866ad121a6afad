/**
 * An operator's record that a dispute was won, for providers that send no event for it (providerB). The
 * dispute's hold is given back through the same rules and unit of work as a provider's reinstatement, once:
 * a free-standing ledger adjustment would leave the dispute holding the order's money, so a later refund of
 * the same payment would take nothing back (the share taken is capped at the order's amount).
 */
import { GatewayError, nowSeconds, type ChangeBus } from '@gw/core';
import type { LedgerStore, TopupOrdersStore } from '@gw/db';
import { decideReversal } from './reversal-rules';

export class DisputeReinstatement {
  constructor(
    private readonly ledger: LedgerStore,
    private readonly orders: TopupOrdersStore,
    private readonly bus: ChangeBus,
  ) {}

  /**
   * Reinstates `disputeId` of the order (or its only withdrawn dispute when none is named). Outcomes:
   * dispute_reinstated (the hold is credited back), noop:dispute already reinstated, duplicate (the same
   * operator call was made before). 404 for an unknown order or dispute, 409 when the dispute must be named.
   */
  async reinstate(tradeNo: string, disputeId: string | undefined, actorId: number): Promise<{ outcome: string; credited: number }> {
    const order = await this.orders.byTradeNo(tradeNo);
    if (!order) throw new GatewayError(404, 'order_not_found', `No top-up order ${tradeNo}`, { param: 'trade_no' });
    let key = disputeId ? `dispute:${disputeId}` : '';
    let credited = 0;
    const r = await this.ledger.reverseTopupOnce(
      // The (provider, event id) claim makes the call once per dispute; provider event ids never start with "operator:".
      { provider: order.provider, eventId: `operator:reinstate:${tradeNo}:${disputeId ?? '*'}`, type: 'operator.dispute_reinstated', at: nowSeconds(), lookup: { tradeNo } },
      (o, reversals, ownerExists) => {
        if (!key) {
          const open = reversals.filter((x) => x.key.startsWith('dispute:') && x.state === 'withdrawn');
          if (open.length !== 1) return { outcome: open.length ? 'ambiguous_dispute' : 'unknown_dispute' };
          key = open[0]!.key;
        }
        if (!reversals.some((x) => x.key === key)) return { outcome: 'unknown_dispute' };
        const d = decideReversal(order.provider, 'operator.dispute_reinstated', { tradeNo }, { key, action: 'reinstated', amount: 0, cumulative: false, currency: null }, o, reversals, ownerExists);
        return 'note' in d ? { ...d, note: `${d.note} by user ${actorId}` } : d;
      },
    );
    if (r.duplicate) return { outcome: 'duplicate', credited: 0 };
    if (r.outcome === 'unknown_dispute') throw new GatewayError(404, 'dispute_not_found', `Order ${tradeNo} has no ${disputeId ? `dispute ${disputeId}` : 'withdrawn dispute'}`, { param: 'dispute_id' });
    if (r.outcome === 'ambiguous_dispute') throw new GatewayError(409, 'dispute_ambiguous', `Order ${tradeNo} has several withdrawn disputes; name one with dispute_id`, { param: 'dispute_id' });
    if (r.moved) {
      credited = r.moved.amount;
      await this.bus.committed('user.changed', { userId: r.moved.userId });
    }
    return { outcome: r.outcome, credited };
  }
}
