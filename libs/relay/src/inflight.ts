/**
 * Requests in flight by relay key and by user, so that revoking a key (disabled, expired by an edit,
 * deleted) or disabling/deleting its owner ends what that credential already started: /v1/messages
 * streams and realtime sessions. It listens to the same change events the key and user caches use
 * (registered after them, so it sees their refreshed state) and aborts each affected request's
 * signal with a GatewayError as the reason; the request's owner decides how to end (the relay:
 * an `error` event on a stream, the error itself before the first byte; realtime: error event and close 1008).
 */
import { GatewayError, type ChangeBus } from '@gw/core';

export interface InflightDeps {
  bus: ChangeBus;
  /** The key still exists, is enabled and not expired (read from the in-memory key index). */
  keyActive(keyId: number): boolean;
  /** The user still exists and is enabled (read from the in-memory user directory). */
  userActive(userId: number): boolean;
  /**
   * The key still exists and is enabled, whatever its expiry (for `sweep`; default keyActive). A key that merely
   * expired while its stream runs is not stopped by any event on one node, so a reload does not stop it either.
   */
  keyEnabled?(keyId: number): boolean;
}

/** One request's registration: its stop signal and the release to call when it ends (idempotent). */
export interface InflightHandle {
  /** Aborted by a revocation, or by the client's own signal when one was given to `open`. */
  signal: AbortSignal;
  /** The revocation that stopped the request, if one did (not the client going away). */
  readonly revocation: GatewayError | null;
  release(): void;
}

interface Entry { ctrl: AbortController; keyId: number; userId: number; revocation: GatewayError | null }

export const keyRevoked = () => new GatewayError(401, 'api_key_revoked', 'The API key was disabled or deleted', { type: 'authentication_error' });
export const ownerDisabled = () => new GatewayError(401, 'user_disabled', 'The owner of this API key was disabled', { type: 'authentication_error' });
export const admissionLost = () => new GatewayError(503, 'admission_lost', 'This gateway node lost its admission store; the request was stopped. Retry on another node.', { type: 'overloaded_error' });

export class InflightRegistry {
  private readonly byKey = new Map<number, Bag>();
  private readonly byUser = new Map<number, Bag>();
  private readonly unsubs: Array<() => void>;

  constructor(private readonly d: InflightDeps) {
    this.unsubs = [
      d.bus.on('apikey.changed', ({ keyId }) => { if (!d.keyActive(keyId)) this.abortAll(this.byKey.get(keyId), keyRevoked()); }),
      d.bus.on('user.changed', ({ userId }) => { if (!d.userActive(userId)) this.abortAll(this.byUser.get(userId), ownerDisabled()); }),
      d.bus.on('holds.lost', () => { for (const set of [...this.byKey.values()]) this.abortAll(set, admissionLost()); }),
    ];
  }

  /**
   * Registers a request of `keyId` (owned by `userId`); already stopped if the credential was revoked meanwhile.
   * With `client`, the handle's one signal also follows the client's (one listener instead of an
   * AbortSignal.any per request, which cost more than the rest of the registration).
   */
  open(keyId: number, userId: number, client?: AbortSignal): InflightHandle {
    const e: Entry = { ctrl: new AbortController(), keyId, userId, revocation: null };
    add(this.byKey, keyId, e);
    add(this.byUser, userId, e);
    if (!this.d.keyActive(keyId)) revoke(e, keyRevoked());
    else if (!this.d.userActive(userId)) revoke(e, ownerDisabled());
    const onClientAbort = () => e.ctrl.abort(client!.reason);
    if (client?.aborted) onClientAbort();
    else client?.addEventListener('abort', onClientAbort, { once: true });
    let released = false;
    return {
      signal: e.ctrl.signal,
      get revocation() { return e.revocation; },
      release: () => {
        if (released) return;
        released = true;
        client?.removeEventListener('abort', onClientAbort);
        remove(this.byKey, keyId, e);
        remove(this.byUser, userId, e);
      },
    };
  }

  /** Requests currently registered. */
  get size(): number {
    let n = 0;
    for (const b of this.byKey.values()) n += b instanceof Set ? b.size : 1;
    return n;
  }

  /**
   * Stops every request whose key or owner is no longer active. For a cache reload (the change feed's resync):
   * a revocation whose notification this node never got (its listener was down when another node wrote it, or
   * the key's re-read failed) reaches the caches only through the reload, which sends no event; without this
   * sweep a stream or realtime session started before it ran on with the revoked key.
   */
  sweep(): void {
    // Owners first: a disabled owner's keys leave the key index too, and its requests are told why.
    for (const [userId, set] of [...this.byUser]) if (!this.d.userActive(userId)) this.abortAll(set, ownerDisabled());
    const enabled = this.d.keyEnabled ?? this.d.keyActive;
    for (const [keyId, set] of [...this.byKey]) if (!enabled(keyId)) this.abortAll(set, keyRevoked());
  }

  close(): void {
    for (const u of this.unsubs) u();
  }

  private abortAll(bag: Bag | undefined, reason: GatewayError): void {
    if (bag instanceof Set) for (const e of [...bag]) revoke(e, reason);
    else if (bag) revoke(bag, reason);
  }
}

function revoke(e: Entry, reason: GatewayError): void {
  if (e.ctrl.signal.aborted) return;
  e.revocation = reason;
  e.ctrl.abort(reason);
}

/**
 * The requests of one key or user: the entry itself while it is the only one (the common case: a Set and its
 * Map slot made and dropped for every request was most of this registry's garbage), a Set from the second on.
 */
type Bag = Entry | Set<Entry>;

function add(m: Map<number, Bag>, id: number, e: Entry): void {
  const b = m.get(id);
  if (!b) m.set(id, e);
  else if (b instanceof Set) b.add(e);
  else m.set(id, new Set([b, e]));
}

function remove(m: Map<number, Bag>, id: number, e: Entry): void {
  const b = m.get(id);
  if (b === e) m.delete(id);
  else if (b instanceof Set) {
    b.delete(e);
    if (!b.size) m.delete(id);
  }
}
