/** The public shapes of redemption codes and batches (snake_case, as the management API speaks). */
import { MAX_INPUT_INTEGER } from '@gw/core/id-input';
import { Type, type Static } from '@sinclair/typebox';
import type { RedemptionBatchRow, RedemptionCodeRow, RedemptionStatus } from '@gw/db';
import { MAX_CODES_PER_BATCH, MAX_CODE_QUOTA } from './redemption';

export const RedemptionStatusSchema = Type.Union(
  [Type.Literal('unused'), Type.Literal('redeemed'), Type.Literal('expired'), Type.Literal('revoked')],
  { description: 'unused | redeemed | expired (unused past expires_at) | revoked' },
);

export const CreateCodesBody = Type.Object({
  batch: Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9._:-]+$', description: 'Name of the batch (letters, digits, . _ : -), new for each creation; revoke acts on it' }),
  count: Type.Integer({ minimum: 1, maximum: MAX_CODES_PER_BATCH, description: `Codes to create (1 to ${MAX_CODES_PER_BATCH})` }),
  quota: Type.Integer({ minimum: 1, maximum: MAX_CODE_QUOTA, description: 'Quota units each code credits' }),
  expires_at: Type.Integer({ minimum: 1, maximum: MAX_INPUT_INTEGER, description: 'Unix seconds after which the codes can no longer be redeemed (future, within 10 years)' }),
});
export type CreateCodesBody = Static<typeof CreateCodesBody>;

export const CodesCreatedView = Type.Object({
  batch: Type.String(),
  quota: Type.Integer(),
  expires_at: Type.Integer(),
  codes: Type.Array(Type.String(), { description: 'The codes in clear. Shown only in this answer: the gateway keeps only their SHA-256' }),
});
export type CodesCreatedView = Static<typeof CodesCreatedView>;

export const RedemptionCodeView = Type.Object({
  id: Type.Integer(),
  prefix: Type.String({ description: 'The first characters of the code (the rest is never stored)' }),
  batch: Type.String(),
  quota: Type.Integer(),
  status: RedemptionStatusSchema,
  expires_at: Type.Integer(),
  created_by: Type.Integer(),
  created_at: Type.Integer(),
  redeemed_by: Type.Union([Type.Integer(), Type.Null()]),
  redeemed_at: Type.Union([Type.Integer(), Type.Null()]),
});
export type RedemptionCodeView = Static<typeof RedemptionCodeView>;

export function toCodeView(r: RedemptionCodeRow, status: RedemptionStatus): RedemptionCodeView {
  return {
    id: r.id, prefix: r.prefix, batch: r.batch, quota: r.quota, status, expires_at: r.expiresAt,
    created_by: r.createdBy, created_at: r.createdAt, redeemed_by: r.redeemedBy, redeemed_at: r.redeemedAt,
  };
}

export const RedemptionBatchView = Type.Object({
  batch: Type.String(),
  quota: Type.Integer(),
  total: Type.Integer(),
  unused: Type.Integer(),
  redeemed: Type.Integer(),
  expired: Type.Integer(),
  revoked: Type.Integer(),
  created_at: Type.Integer(),
  expires_at: Type.Integer(),
});
export type RedemptionBatchView = Static<typeof RedemptionBatchView>;

export function toBatchView(b: RedemptionBatchRow): RedemptionBatchView {
  return {
    batch: b.batch, quota: b.quota, total: b.total, unused: b.unused, redeemed: b.redeemed, expired: b.expired,
    revoked: b.revoked, created_at: b.createdAt, expires_at: b.expiresAt,
  };
}

export const RedeemedView = Type.Object({
  quota: Type.Integer({ description: 'Quota units credited' }),
  balance: Type.Integer({ description: 'The balance after the credit' }),
});
export type RedeemedView = Static<typeof RedeemedView>;
