import type { UserRow } from '@gw/db';

/** Who is calling the management API, and through what. */
export interface Principal {
  user: UserRow;
  via: 'session' | 'token';
  /** Hash of the session id (via session) — lets logout end exactly this session. */
  sessionHash?: string;
  tokenId?: number;
}

/** Prefix of management access tokens; relay keys start with `sk-` and are refused on /api/. */
/** The credential a principal is calling with, as `endCredentials` keeps it: its session, or its access token. */
export const callerCredential = (p: Principal): { sessionHash?: string; tokenId?: number } =>
  (p.via === 'session' ? { sessionHash: p.sessionHash } : { tokenId: p.tokenId });

export const ACCESS_TOKEN_PREFIX = 'gwm_';
export const SESSION_COOKIE = 'gw_session';
