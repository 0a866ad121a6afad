import { afterEach, beforeEach } from 'bun:test';
import type { ContractEnv, ContractRepos, MakeEnv } from './env';

/** Registers a fresh environment per test in the current describe block; read it through the getter. */
export function useEnv(make: MakeEnv): () => ContractEnv {
  let env: ContractEnv | null = null;
  beforeEach(async () => { env = await make(); });
  afterEach(async () => { await env?.close(); env = null; });
  return () => env!;
}

/** Far beyond 32 bits, exact as a double (< 2^53): the scale quotas reach. */
export const BIG = 999_999_999_999_999;

let n = 0;
/** A user (and optionally a key) to hang rows on. */
export async function seedUser(r: ContractRepos, over: Partial<Parameters<ContractRepos['users']['insert']>[0]> = {}) {
  n++;
  return r.users.insert({ username: `u${n}`, passwordHash: 'h', createdAt: 1_000, updatedAt: 1_000, ...over });
}

export async function seedKey(r: ContractRepos, userId: number, over: Partial<Parameters<ContractRepos['apiKeys']['insert']>[0]> = {}) {
  n++;
  return r.apiKeys.insert({ userId, keyHash: `kh${n}`, prefix: 'sk-x', createdAt: 1_000, updatedAt: 1_000, ...over });
}
