/** Hand-made balance changes by an admin, recorded in the ledger as kind 'adjust' with the actor. */
import { GatewayError, nowSeconds, type ChangeBus } from '@gw/core';
import { ROLE, ledger, users, type Db, type LedgerRepo, type LedgerRow, type UserRow, type UsersRepo } from '@gw/db';
import { and, eq } from 'drizzle-orm';

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
    private readonly db: Db,
    private readonly usersRepo: UsersRepo,
    private readonly ledger: LedgerRepo,
    private readonly bus: ChangeBus,
  ) {}

  /**
   * Credits or debits a user. Like user management, an admin acts only on users of a lower role
   * (so never on itself or another admin); root acts on anyone. The balance check and the write are
   * one IMMEDIATE transaction, so two debits cannot both pass a check against the same balance.
   */
  adjust(actor: UserRow, input: AdjustInput): { entry: LedgerRow; balance: number } {
    if (!Number.isSafeInteger(input.amount) || input.amount === 0) throw new GatewayError(400, 'invalid_amount', 'amount must be a non-zero integer', { param: 'amount' });
    const note = input.note.trim();
    if (!note) throw new GatewayError(400, 'missing_field', 'note: a reason is required', { param: 'note' });
    const target = this.usersRepo.byId(input.userId);
    if (!target) throw new GatewayError(404, 'user_not_found', `No user ${input.userId}`, { param: 'user_id' });
    if (actor.role < ROLE.root && target.role >= actor.role) {
      throw new GatewayError(403, 'insufficient_role', 'Admins can only adjust the balance of users with a lower role');
    }
    const ref = `adjust:${crypto.randomUUID()}`;
    const entry = this.db.transaction((tx) => {
      const cur = tx.select({ quota: users.quota }).from(users).where(eq(users.id, target.id)).get();
      if (!cur) throw new GatewayError(404, 'user_not_found', `No user ${input.userId}`, { param: 'user_id' });
      if (cur.quota + input.amount < 0 && !input.allowNegative) {
        throw new GatewayError(400, 'insufficient_balance', `Balance ${cur.quota} cannot cover a debit of ${-input.amount}; send allow_negative: true to go below zero`, { param: 'amount' });
      }
      const at = nowSeconds();
      const balance = this.ledger.apply({ userId: target.id, kind: 'adjust', amount: input.amount, ref, note, actorId: actor.id, at }, tx);
      if (balance === null) throw new Error(`duplicate adjustment ref ${ref}`);
      return tx.select().from(ledger).where(and(eq(ledger.kind, 'adjust'), eq(ledger.ref, ref))).get()!;
    }, { behavior: 'immediate' });
    this.bus.emit('user.changed', { userId: target.id });
    return { entry, balance: entry.balanceAfter };
  }
}
