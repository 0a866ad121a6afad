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
   * Reinstates `disputeId` of the order (or its only withdrawn dispute when none is named; with none withdrawn, the one
   * reinstated last, so a repeated call is a duplicate). Outcomes:
   * dispute_reinstated (the hold is credited back), noop:dispute already reinstated, duplicate (the same
   * operator call was made before). 404 for an unknown order or dispute, 409 when the dispute must be named.
   */
  async reinstate(tradeNo: string, disputeId: string | undefined, actorId: number): Promise<{ outcome: string; credited: number }> {
    const order = await this.orders.byTradeNo(tradeNo);
    if (!order) throw new GatewayError(404, 'order_not_found', `No top-up order ${tradeNo}`, { param: 'trade_no' });
    try {
      return await this.reinstateKey(order.provider, tradeNo, disputeId ? `dispute:${disputeId}` : null, actorId);
    } catch (err) {
      // Unnamed: the order's only withdrawn dispute was found, and the call is made again naming it, so it is claimed
      // under the same id as a call that names it (a later dispute of the order is then another call, not a duplicate).
      if (err instanceof Resolved) return this.reinstateKey(order.provider, tradeNo, err.key, actorId);
      throw err;
    }
  }

  /**
   * One unit of work. `key` null: the order's only withdrawn dispute is looked up and thrown as Resolved. A dispute that
   * is unknown or ambiguous is thrown inside the unit of work, so the call's claim is rolled back: asked again once the
   * dispute's withdrawal has arrived, it applies (recorded, it answered `duplicate` forever and gave nothing back).
   */
  private async reinstateKey(provider: string, tradeNo: string, key: string | null, actorId: number): Promise<{ outcome: string; credited: number }> {
    const disputeId = key?.slice('dispute:'.length);
    const r = await this.ledger.reverseTopupOnce(
      // The (provider, event id) claim makes the call once per dispute; provider event ids never start with "operator:".
      { provider, eventId: `operator:reinstate:${tradeNo}:${disputeId ?? '*'}`, type: 'operator.dispute_reinstated', at: nowSeconds(), lookup: { tradeNo } },
      (o, reversals, ownerExists) => {
        if (!o) throw new GatewayError(404, 'order_not_found', `No top-up order ${tradeNo}`, { param: 'trade_no' });
        if (!key) {
          const open = reversals.filter((x) => x.key.startsWith('dispute:') && x.state === 'withdrawn');
          if (open.length > 1) throw new GatewayError(409, 'dispute_ambiguous', `Order ${tradeNo} has several withdrawn disputes; name one with dispute_id`, { param: 'dispute_id' });
          if (open.length === 1) throw new Resolved(open[0]!.key);
          // None open: a repeated call (the one before reinstated it) names the dispute last reinstated, so it answers as
          // that call's duplicate (or noop:dispute already reinstated) instead of 404.
          const done = reversals.filter((x) => x.key.startsWith('dispute:') && x.state === 'reinstated').sort((a, b) => b.updatedAt - a.updatedAt);
          if (done.length) throw new Resolved(done[0]!.key);
        }
        if (!key || !reversals.some((x) => x.key === key)) {
          throw new GatewayError(404, 'dispute_not_found', `Order ${tradeNo} has no ${disputeId ? `dispute ${disputeId}` : 'withdrawn dispute'}`, { param: 'dispute_id' });
        }
        const d = decideReversal(provider, 'operator.dispute_reinstated', { tradeNo }, { key, action: 'reinstated', amount: 0, cumulative: false, currency: null }, o, reversals, ownerExists);
        return 'note' in d ? { ...d, note: `${d.note} by user ${actorId}` } : d;
      },
    );
    if (r.duplicate) return { outcome: 'duplicate', credited: 0 };
    if (!r.moved) return { outcome: r.outcome, credited: 0 };
    await this.bus.committed('user.changed', { userId: r.moved.userId });
    return { outcome: r.outcome, credited: r.moved.amount };
  }
}

/** Thrown inside the unit of work (rolling back its claim) with the dispute an unnamed call is about. */
class Resolved extends Error {
  constructor(readonly key: string) {
    super(key);
  }
}
