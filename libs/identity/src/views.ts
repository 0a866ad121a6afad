import { Type, type Static } from '@sinclair/typebox';
import { inexactFields } from '@gw/core';
import type { UserRow } from '@gw/db';
import { LimitView, limitView } from './limit-fields';

/** A user as every API returns it: no password hash, no TOTP secret, no lock counters. */
export const UserView = Type.Object({
  id: Type.Integer(),
  username: Type.String(),
  display_name: Type.String(),
  email: Type.Union([Type.String(), Type.Null()]),
  role: Type.Integer({ description: '1 user, 10 admin, 100 root' }),
  status: Type.Integer({ description: '1 enabled, 2 disabled' }),
  group: Type.String(),
  quota: Type.Integer({ description: 'Prepaid balance in quota units' }),
  used_quota: Type.Integer(),
  request_count: Type.Integer(),
  totp_enabled: Type.Boolean(),
  ...LimitView,
  created_at: Type.Integer(),
  updated_at: Type.Integer(),
  inexact: Type.Optional(Type.Array(Type.String(), {
    description: 'Only when a money or counter field of this row is stored beyond 2^53 − 1 (written outside the gateway): those fields, whose value above is the database value already rounded. Requests on such a balance are refused (402 balance_inexact).',
  })),
});
export type UserView = Static<typeof UserView>;

export function toUserView(u: UserRow): UserView {
  const v: UserView = {
    id: u.id, username: u.username, display_name: u.displayName, email: u.email, role: u.role,
    status: u.status, group: u.group, quota: u.quota, used_quota: u.usedQuota, request_count: u.requestCount,
    totp_enabled: u.totpEnabled, ...limitView(u), created_at: u.createdAt, updated_at: u.updatedAt,
  };
  const inexact = inexactFields({ quota: u.quota, used_quota: u.usedQuota, request_count: u.requestCount });
  if (inexact) v.inexact = inexact;
  return v;
}

export const AccessTokenView = Type.Object({
  id: Type.Integer(),
  name: Type.String(),
  prefix: Type.String({ description: 'First characters of the token, for recognition' }),
  created_at: Type.Integer(),
  expires_at: Type.Union([Type.Integer(), Type.Null()]),
  last_used_at: Type.Union([Type.Integer(), Type.Null()]),
  revoked: Type.Boolean(),
});
export type AccessTokenView = Static<typeof AccessTokenView>;

export const LoginSessionView = Type.Object({
  id: Type.String({ description: 'The session\'s name in this API: the first 16 hex characters of the SHA-256 of its cookie (not the cookie)' }),
  created_at: Type.Integer(),
  expires_at: Type.Integer(),
  ip: Type.String({ description: 'The address it logged in from' }),
  user_agent: Type.String({ description: 'The User-Agent it logged in with (at most 512 characters)' }),
  current: Type.Boolean({ description: 'The session making this request' }),
});
export type LoginSessionView = Static<typeof LoginSessionView>;
