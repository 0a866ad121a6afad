import { GatewayError, nowSeconds } from '@gw/core';
import { ipAllowed } from '@gw/identity';
import type { LimitFields } from './limits';

/** The relay key fields the gate reads (structurally @gw/identity's ApiKeyRecord). */
export interface GateKey extends LimitFields {
  id: number;
  userId: number;
  status: number;
  expiresAt: number | null;
  models: string[] | null;
  allowIps: string[] | null;
  group: string | null;
  unlimitedQuota: boolean;
  remainQuota: number;
}

/** The owner fields the gate reads (structurally @gw/identity's UserAccount). */
export interface GateUser extends LimitFields {
  id: number;
  status: number;
  group: string;
}

/** Management access tokens never work on /v1/. */
const MANAGEMENT_PREFIX = 'gwm_';

/** The relay key a request presents: `x-api-key`, else `Authorization: Bearer`. */
export function presentedKey(headers: Headers): string | null {
  const x = headers.get('x-api-key')?.trim();
  if (x) return x;
  const authz = headers.get('authorization');
  if (!authz) return null;
  const m = /^Bearer\s+(.+)$/i.exec(authz.trim());
  return m?.[1]?.trim() || null;
}

/**
 * Key checks of /v1/*, split in two by the contract's check order: `authenticate` (first, 401 for a
 * missing/unknown key) and `authorize` (after the body is valid: status, expiry, owner, model and IP
 * allow-lists). Everything is in memory. Rate limits follow, in RequestLimiter.
 */
export class RelayGate {
  constructor(private readonly deps: {
    lookup: (plainKey: string) => GateKey | undefined;
    user: (userId: number) => GateUser | undefined;
  }) {}

  authenticate(headers: Headers): GateKey {
    const plain = presentedKey(headers);
    if (!plain) throw new GatewayError(401, 'missing_api_key', 'Send the API key as x-api-key or Authorization: Bearer');
    if (plain.startsWith(MANAGEMENT_PREFIX)) {
      throw new GatewayError(401, 'wrong_credential_kind', 'Management access tokens are not accepted on /v1/; use a relay API key (sk-…)');
    }
    const key = this.deps.lookup(plain);
    if (!key) throw new GatewayError(401, 'invalid_api_key', 'Invalid API key');
    return key;
  }

  /** Status/expiry/owner (401), model and IP allow-lists (403). Returns the owner and routing group. */
  authorize(key: GateKey, model: string | null, ip: string): { user: GateUser; group: string } {
    if (key.status !== 1) throw new GatewayError(401, 'api_key_disabled', 'This API key is disabled');
    if (key.expiresAt !== null && key.expiresAt <= nowSeconds()) throw new GatewayError(401, 'api_key_expired', 'This API key has expired');
    const user = this.deps.user(key.userId);
    if (!user || user.status !== 1) throw new GatewayError(401, 'user_disabled', 'The owner of this API key is disabled');
    if (model !== null && key.models && key.models.length && !key.models.includes(model)) {
      throw new GatewayError(403, 'model_not_allowed', `This API key may not use model ${model}`, { param: 'model' });
    }
    if (!ipAllowed(key.allowIps, ip)) {
      throw new GatewayError(403, 'ip_not_allowed', 'This API key may not be used from this address');
    }
    return { user, group: key.group || user.group };
  }
}
