import type { HoldStore, Mirror } from './port';

/** These users' balances and those of their limited keys, as committed now (absent users left out). */
export type AccountsReader = (userIds: number[]) => Promise<Array<{ userId: number; user: Mirror; keys: Array<{ keyId: number; mirror: Mirror }> }>>;

/** Users whose mirrors one ledger read checks. */
const CHUNK = 500;

/**
 * Brings the mirrors of the users holding now (the store's index), and of `also`, up to the ledger's versions: one
 * ledger read per 500 users, their writes to the store sent together. Shared by the leader's reconciler (a balance
 * move whose mirror update was lost) and every node's change-feed resync (a follow batch that failed, or changes
 * missed while nobody listened). Only newer versions are installed and only over an existing mirror, so this never
 * undoes a more recent release and never creates a mirror admission would load. Throws on the first failure.
 */
export async function refreshHolderMirrors(store: HoldStore, accounts: AccountsReader, also: Iterable<number> = []): Promise<void> {
  const users = [...new Set([...(await store.holders()), ...also])];
  for (let i = 0; i < users.length; i += CHUNK) {
    const found = await accounts(users.slice(i, i + CHUNK));
    await Promise.all(found.flatMap((a) => [
      store.applyBalance({ userId: a.userId }, a.user, { ifPresent: true }),
      ...a.keys.map((k) => store.applyBalance({ userId: a.userId, keyId: k.keyId }, k.mirror, { ifPresent: true })),
    ]));
  }
}
