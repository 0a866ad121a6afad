/** Hand-made balance changes by an admin, recorded in the ledger as kind 'adjust' with the actor. */
import { GatewayError, nowSeconds, type ChangeBus } from '@gw/core';
import { ROLE, type LedgerRow, type LedgerStore, type UserRow, type UsersStore } from '@gw/db';

export interface AdjustInput {
  userId: number;
  /** Signed, non-zero quota units. */
  amount: number;
  note: string;
  /** Allow the balance to go below zero (a debit otherwise stops at 0). */
  allowNegative?: boolean;
}

export class LedgerAdmin {
  constructor(
    private readonly usersRepo: UsersStore,
    private readonly ledger: LedgerStore,
    private readonly bus: ChangeBus,
  ) {}

  /**
   * Credits or debits a user. Like user management, an admin acts only on users of a lower role
   * (so never on itself or another admin); root acts on anyone. The balance check and the write are
   * one unit of work (LedgerStore.adjustChecked), so two debits cannot both pass a check against the same balance.
   */
  async adjust(actor: UserRow, input: AdjustInput): Promise<{ entry: LedgerRow; balance: number }> {
    if (!Number.isSafeInteger(input.amount) || input.amount === 0) throw new GatewayError(400, 'invalid_amount', 'amount must be a non-zero integer', { param: 'amount' });
    const note = input.note.trim();
    if (!note) throw new GatewayError(400, 'missing_field', 'note: a reason is required', { param: 'note' });
    const target = await this.usersRepo.byId(input.userId);
    if (!target) throw new GatewayError(404, 'user_not_found', `No user ${input.userId}`, { param: 'user_id' });
    if (actor.role < ROLE.root && target.role >= actor.role) {
      throw new GatewayError(403, 'insufficient_role', 'Admins can only adjust the balance of users with a lower role');
    }
    const ref = `adjust:${crypto.randomUUID()}`;
    const r = await this.ledger.adjustChecked({
      userId: target.id, amount: input.amount, ref, note, actorId: actor.id, at: nowSeconds(), allowNegative: input.allowNegative ?? false,
    });
    if (!r.ok && r.reason === 'no_user') throw new GatewayError(404, 'user_not_found', `No user ${input.userId}`, { param: 'user_id' });
    if (!r.ok) {
      throw new GatewayError(400, 'insufficient_balance', `Balance ${r.balance} cannot cover a debit of ${-input.amount}; send allow_negative: true to go below zero`, { param: 'amount' });
    }
    await this.bus.committed('user.changed', { userId: target.id });
    return { entry: r.entry, balance: r.entry.balanceAfter };
  }
}
