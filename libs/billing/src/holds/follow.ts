import { errorText, type ChangeBus, type Logger } from '@gw/core';
import type { HoldStore, Mirror } from './port';

/** Reads committed balances with their versions (the ledger's truth). */
export interface MirrorSource {
  mirrors(userId: number, keyId: number | null): Promise<{ user: Mirror | null; key: Mirror | null }>;
  /** A key's owner and its remain_quota mirror; null = no such key. */
  keyMirror(keyId: number): Promise<{ userId: number; mirror: Mirror } | null>;
}

/**
 * Keeps the shared store's mirrors current for balance moves other than this node's charges (top-ups,
 * admin adjustments, redemption codes, user creation, key edits): each is announced as user.changed
 * or apikey.changed, locally (awaited by the writer, so its next request sees the new balance) and on
 * every other node through the change feed. The balance is read with its version and installed only
 * if newer, so the many nodes applying one change, in any order, agree; a mirror the store does not
 * hold is left for admission to load. Charges need none of this:
 * their release installs the mirror the commit read back.
 */
export function followBalances(bus: ChangeBus, store: HoldStore, source: MirrorSource, log?: Logger): () => void {
  const offUser = bus.on('user.changed', async ({ userId }) => {
    try {
      const { user } = await source.mirrors(userId, null);
      if (user) await store.applyBalance({ userId }, user, { ifPresent: true });
    } catch (err) {
      // The store keeps the older mirror; the next change or the reconciler's release brings it up to date.
      log?.warn('hold.mirror_failed', { userId, cause: errorText(err) });
    }
  });
  const offKey = bus.on('apikey.changed', async ({ keyId }) => {
    try {
      const k = await source.keyMirror(keyId);
      if (k) await store.applyBalance({ userId: k.userId, keyId }, k.mirror, { ifPresent: true });
    } catch (err) {
      log?.warn('hold.mirror_failed', { keyId, cause: errorText(err) });
    }
  });
  // A ledger entry applied on this node carries its version: installed as is, no read.
  const offBalance = bus.on('balance.changed', async ({ userId, balance, version }) => {
    if (version === undefined) return; // a charge: its release installed the mirror
    try {
      await store.applyBalance({ userId }, { balance, version }, { ifPresent: true });
    } catch (err) {
      log?.warn('hold.mirror_failed', { userId, cause: errorText(err) });
    }
  });
  return () => { offUser(); offKey(); offBalance(); };
}
