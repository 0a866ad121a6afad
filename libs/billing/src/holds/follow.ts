import { BatchedRefresh, type ChangeBus } from '@gw/core';
import type { HoldStore, Mirror } from './port';
import { refreshHolderMirrors, type AccountsReader } from './refresh-mirrors';

/** Reads committed balances with their versions (the ledger's truth), many records per statement. */
export interface MirrorSource {
  /** These users' balances (absent users left out). */
  userMirrors(userIds: number[]): Promise<Array<{ userId: number; mirror: Mirror }>>;
  /** These keys' owners and remain_quota mirrors (absent keys left out). */
  keyMirrors(keyIds: number[]): Promise<Array<{ keyId: number; userId: number; mirror: Mirror }>>;
  /** Users' balances with their limited keys' (the resync's read, as the reconciler's). */
  accounts: AccountsReader;
}

export interface BalanceFollower {
  stop(): void;
  /**
   * For the change feed's resync: the mirrors of users holding now, and of every user and key whose follow batch
   * failed since the last resync, read from the ledger again. Throws when that fails (the feed retries it), keeping
   * what it owes for the next try.
   */
  resync(): Promise<void>;
}

/**
 * Keeps the shared store's mirrors current for balance moves other than this node's charges (top-ups,
 * admin adjustments, redemption codes, user creation, key edits): each is announced as user.changed
 * or apikey.changed, locally (awaited by the writer, so its next request sees the new balance) and on
 * every other node through the change feed. The balance is read with its version and installed only
 * if newer, so the many nodes applying one change, in any order, agree; a mirror the store does not
 * hold is left for admission to load. Charges need none of this:
 * their release installs the mirror the commit read back.
 *
 * Changes heard together are read together (BatchedRefresh): one statement per kind for a burst, where a
 * 2,000-user burst cost 2,000 reads one after another. A batch that fails is not dropped: every event of it
 * rejects, so the change feed (or the committed write's repair) resyncs, and the resync reads those ids again.
 */
export function followBalances(bus: ChangeBus, store: HoldStore, source: MirrorSource): BalanceFollower {
  const owedUsers = new Set<number>();
  const owedKeys = new Set<number>();
  const owing = <T>(owed: Set<number>, ids: number[], work: () => Promise<T>): Promise<T> =>
    work().catch((err) => {
      for (const id of ids) owed.add(id);
      throw err;
    });
  const users = new BatchedRefresh<number>((ids) => owing(owedUsers, ids ?? [], async () => {
    const found = await source.userMirrors(ids ?? []);
    await Promise.all(found.map((u) => store.applyBalance({ userId: u.userId }, u.mirror, { ifPresent: true })));
  }));
  const keys = new BatchedRefresh<number>((ids) => owing(owedKeys, ids ?? [], () => applyKeys(ids ?? [])));
  async function applyKeys(ids: number[]): Promise<void> {
    if (!ids.length) return;
    const found = await source.keyMirrors(ids);
    await Promise.all(found.map((k) => store.applyBalance({ userId: k.userId, keyId: k.keyId }, k.mirror, { ifPresent: true })));
  }
  const offUser = bus.on('user.changed', ({ userId }) => users.run(userId));
  const offKey = bus.on('apikey.changed', ({ keyId }) => keys.run(keyId));
  // A ledger entry applied on this node carries its version: installed as is, no read.
  const offBalance = bus.on('balance.changed', async ({ userId, balance, version }) => {
    if (version === undefined) return; // a charge: its release installed the mirror
    await owing(owedUsers, [userId], () => store.applyBalance({ userId }, { balance, version }, { ifPresent: true }));
  });
  return {
    stop() { offUser(); offKey(); offBalance(); },
    async resync() {
      const u = [...owedUsers];
      const k = [...owedKeys];
      owedUsers.clear();
      owedKeys.clear();
      try {
        await refreshHolderMirrors(store, (ids) => source.accounts(ids), u);
        await applyKeys(k);
      } catch (err) {
        for (const id of u) owedUsers.add(id);
        for (const id of k) owedKeys.add(id);
        throw err;
      }
    },
  };
}
