import type { Redis } from 'ioredis';
import { defineScript } from './script';

/** Sets the owner when there is none; answers the owner either way. */
const CLAIM = `
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
`;

/**
 * Binds REDIS_PREFIX to one database. Every key under the prefix is named by user, key and budget ids, which
 * two databases both have: two clusters on one Redis and one prefix (the default `gw:`, say) would admit each
 * other's users against each other's balances and holds, and one's reconciler would release the other's holds,
 * without an error anywhere. The first node of a database to start writes the database's identity under the
 * prefix; a node of another database finds it there and does not start. Returns the owner found when it is not
 * `identity`, else null. A Redis that lost its data has no owner: the next node to start takes it.
 */
export async function claimPrefix(redis: Redis, prefix: string, identity: string): Promise<string | null> {
  const claim = defineScript(redis, 'gwPrefixOwner', 1, CLAIM);
  const owner = String(await claim([`${prefix}{owner}`], [identity]));
  return owner === identity ? null : owner;
}

/** The identity `<prefix>{owner}` holds, or null when none does (read only: see claimPrefix). */
export async function prefixOwner(redis: Redis, prefix: string): Promise<string | null> {
  return redis.get(`${prefix}{owner}`);
}
