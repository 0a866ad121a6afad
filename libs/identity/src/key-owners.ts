/**
 * Every stored relay key the API-key index knows, by id: its owner, and the hash it is indexed under (null while
 * it is left out of the index: its owner is disabled). The one place a key's owner is kept: the relay's index
 * (ApiKeyService, by hash) holds only the keys it serves, and the management API's visibility rules (an admin
 * below root sees no key id of root or another admin) must still know whose a disabled user's keys are (once root
 * disabled an admin, the others were shown that admin's key ids). Memory only, fed by the index's own reads.
 */
export class KeyOwners {
  private readonly byKey = new Map<number, { userId: number; hash: string | null }>();
  private readonly keysByOwner = new Map<number, Set<number>>();

  get(keyId: number): number | undefined {
    return this.byKey.get(keyId)?.userId;
  }

  /** The hash the key is indexed under; undefined = unknown, or known and left out of the index. */
  hashOf(keyId: number): string | undefined {
    return this.byKey.get(keyId)?.hash ?? undefined;
  }

  /** Records a key read from the store (a key never changes hands, so a known one keeps its entry). */
  set(keyId: number, userId: number): void {
    if (this.byKey.get(keyId)?.userId === userId) return;
    this.forgetKey(keyId);
    this.byKey.set(keyId, { userId, hash: null });
    let keys = this.keysByOwner.get(userId);
    if (!keys) this.keysByOwner.set(userId, (keys = new Set()));
    keys.add(keyId);
  }

  /** Marks a known key indexed under `hash`, or (null) left out of the index. */
  setHash(keyId: number, hash: string | null): void {
    const e = this.byKey.get(keyId);
    if (e) e.hash = hash;
  }

  /** The key is gone from the store. */
  forgetKey(keyId: number): void {
    const userId = this.byKey.get(keyId)?.userId;
    if (userId === undefined) return;
    this.byKey.delete(keyId);
    const keys = this.keysByOwner.get(userId);
    keys?.delete(keyId);
    if (keys && !keys.size) this.keysByOwner.delete(userId);
  }

  /** The user is deleted: its keys went with it (ON DELETE CASCADE, with no event per key). */
  forgetUser(userId: number): void {
    for (const keyId of this.keysOf(userId)) this.forgetKey(keyId);
  }

  /** The ids of the user's known keys (a copy). */
  keysOf(userId: number): number[] {
    return [...(this.keysByOwner.get(userId) ?? [])];
  }

  /** Every key id known. */
  keyIds(): number[] {
    return [...this.byKey.keys()];
  }
}
