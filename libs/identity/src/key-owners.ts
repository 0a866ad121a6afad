/**
 * Who owns each stored relay key, for every key, including those of disabled users. The relay's key index
 * (ApiKeyService) leaves a disabled user's keys out, so it could not say whose they were; the management API's
 * visibility rules (an admin below root sees no key id of root or another admin) asked it anyway and, once root
 * disabled an admin, showed that admin's key ids to the others. Memory only, fed by the index's own reads.
 */
export class KeyOwners {
  private readonly ownerByKey = new Map<number, number>();
  private readonly keysByOwner = new Map<number, Set<number>>();

  get(keyId: number): number | undefined {
    return this.ownerByKey.get(keyId);
  }

  /** Records a key read from the store (a key never changes hands, so a known one needs nothing more). */
  set(keyId: number, userId: number): void {
    if (this.ownerByKey.get(keyId) === userId) return;
    this.forgetKey(keyId);
    this.ownerByKey.set(keyId, userId);
    let keys = this.keysByOwner.get(userId);
    if (!keys) this.keysByOwner.set(userId, (keys = new Set()));
    keys.add(keyId);
  }

  /** The key is gone from the store. */
  forgetKey(keyId: number): void {
    const userId = this.ownerByKey.get(keyId);
    if (userId === undefined) return;
    this.ownerByKey.delete(keyId);
    const keys = this.keysByOwner.get(userId);
    keys?.delete(keyId);
    if (keys && !keys.size) this.keysByOwner.delete(userId);
  }

  /** The user is deleted: its keys went with it (ON DELETE CASCADE, with no event per key). */
  forgetUser(userId: number): void {
    for (const keyId of [...(this.keysByOwner.get(userId) ?? [])]) this.forgetKey(keyId);
  }

  /** Every key id known. */
  keyIds(): number[] {
    return [...this.ownerByKey.keys()];
  }
}
