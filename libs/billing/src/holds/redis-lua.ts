/**
 * The RedisHoldStore's scripts. Per user (hash tag `{u:<id>}`, so one user's keys share a cluster
 * slot and every script touches one slot):
 *   acct   hash  bal, ver (the mirror), held (Σ holds of the user, limbo included)
 *   k:<id> hash  bal, ver, held for a limited key (keys belong to one user)
 *   holds  hash  ref → "<amount>:<keyId or empty>"
 *   leases zset  ref → lease expiry (server ms)
 *   limbo  zset  ref → when its lease lapsed
 * Integers are written with %d so Lua's %.14g never turns them into exponents.
 */
import { LUA_NOW } from '@gw/core/redis/script';

const HELPERS = `${LUA_NOW}
local function s(x) return string.format('%d', x) end
local function num(x) return tonumber(x or 0) end
-- create: whether a missing mirror may be installed. Only admission's load creates one (after the
-- data-loss guard); release and follow-up updates only move an existing one, or a mirror created
-- right after a data loss would let admissions in before every node's live holds are back.
-- Such an update of a hash the renewals brought back (no mirror yet) is noted instead (nbal, nver):
-- a load that read the ledger before that commit installs the newer of the two, or the commit's
-- charge would count neither in the balance nor as a hold (its release dropped the hold).
local function install(key, bal, ver, create)
  if bal == nil or bal == '' then return 0 end
  local cur = redis.call('HGET', key, 'ver')
  if not cur and not create then
    if redis.call('EXISTS', key) == 1 then
      local nv = redis.call('HGET', key, 'nver')
      if not nv or tonumber(nv) < tonumber(ver) then redis.call('HSET', key, 'nbal', bal, 'nver', ver) end
    end
    return 0
  end
  if not cur then
    local noted = redis.call('HMGET', key, 'nbal', 'nver')
    if noted[2] and tonumber(noted[2]) > tonumber(ver) then bal, ver = noted[1], noted[2] end
    redis.call('HDEL', key, 'nbal', 'nver')
  end
  if cur and tonumber(cur) >= tonumber(ver) then return 0 end
  redis.call('HSET', key, 'bal', bal, 'ver', ver)
  return 1
end
local function parse(h)
  local amount, keyId = string.match(h, '^(-?%d+):(.*)$')
  return tonumber(amount), keyId
end
`;

/** KEYS acct, holds, leases, key · ARGV ref, amount, leaseMs, keyId|'' → {1, amount} | {0, scope, available} | {-1, scope} */
export const RESERVE = `${HELPERS}
local ref, amount, keyId = ARGV[1], tonumber(ARGV[2]), ARGV[4]
local existing = redis.call('HGET', KEYS[2], ref)
if existing then return {1, parse(existing)} end
local u = redis.call('HMGET', KEYS[1], 'bal', 'held')
if not u[1] then return {-1, 1} end
local k
if keyId ~= '' then
  k = redis.call('HMGET', KEYS[4], 'bal', 'held')
  if not k[1] then return {-1, 2} end
end
-- QuotaService's rule: refuse when amount > available or nothing is available.
local ua = num(u[1]) - num(u[2])
if amount > ua or ua <= 0 then return {0, 1, ua} end
if k then
  local ka = num(k[1]) - num(k[2])
  if amount > ka or ka <= 0 then return {0, 2, ka} end
  redis.call('HINCRBY', KEYS[4], 'held', ARGV[2])
end
redis.call('HINCRBY', KEYS[1], 'held', ARGV[2])
redis.call('HSET', KEYS[2], ref, ARGV[2] .. ':' .. keyId)
redis.call('ZADD', KEYS[3], s(now + tonumber(ARGV[3])), ref)
return {1, amount}
`;

/** KEYS acct, holds, key · ARGV ref, cost → charged | -1 (unknown hold) */
export const SETTLE = `${HELPERS}
local h = redis.call('HGET', KEYS[2], ARGV[1])
if not h then return -1 end
local amount, keyId = parse(h)
local u = redis.call('HMGET', KEYS[1], 'bal', 'held')
local cap = amount + math.max(0, num(u[1]) - num(u[2]))
if keyId ~= '' then
  local k = redis.call('HMGET', KEYS[3], 'bal', 'held')
  if k[1] then cap = math.min(cap, amount + math.max(0, num(k[1]) - num(k[2]))) end
end
local charged = math.min(tonumber(ARGV[2]), cap)
redis.call('HINCRBY', KEYS[1], 'held', s(charged - amount))
if keyId ~= '' then redis.call('HINCRBY', KEYS[3], 'held', s(charged - amount)) end
redis.call('HSET', KEYS[2], ARGV[1], s(charged) .. ':' .. keyId)
return charged
`;

/** KEYS acct, holds, leases, limbo, key · ARGV ref, userBal, userVer, keyBal, keyVer ('' = none) */
export const RELEASE = `${HELPERS}
local h = redis.call('HGET', KEYS[2], ARGV[1])
if h then
  local amount, keyId = parse(h)
  redis.call('HINCRBY', KEYS[1], 'held', s(-amount))
  if keyId ~= '' then redis.call('HINCRBY', KEYS[5], 'held', s(-amount)) end
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
end
install(KEYS[1], ARGV[2], ARGV[3], false)
install(KEYS[5], ARGV[4], ARGV[5], false)
return 1
`;

/** KEYS mirror hash · ARGV bal, ver, ifPresent ('1': only replace an existing mirror) → 1 installed | 0 not */
export const APPLY = `${HELPERS}
return install(KEYS[1], ARGV[1], ARGV[2], ARGV[3] ~= '1')
`;

/**
 * KEYS acct, holds, leases, limbo, then one key hash per hold · ARGV leaseMs, then ref, amount,
 * keyId per hold → how many holds were missing and registered again.
 */
export const RENEW = `${HELPERS}
local expiry = s(now + tonumber(ARGV[1]))
local registered = 0
for i = 1, #KEYS - 4 do
  local ref, amount, keyId = ARGV[3 * i - 1], ARGV[3 * i], ARGV[3 * i + 1]
  if redis.call('HEXISTS', KEYS[2], ref) == 0 then
    redis.call('HSET', KEYS[2], ref, amount .. ':' .. keyId)
    redis.call('HINCRBY', KEYS[1], 'held', amount)
    if keyId ~= '' then redis.call('HINCRBY', KEYS[4 + i], 'held', amount) end
    registered = registered + 1
  end
  redis.call('ZADD', KEYS[3], expiry, ref)
  redis.call('ZREM', KEYS[4], ref)
end
return registered
`;

/** KEYS holds, leases, limbo → {holds count, ref1, record1, ref2, record2, …} of the limbo */
export const SWEEP = `${HELPERS}
for _, ref in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', s(now))) do
  redis.call('ZADD', KEYS[3], s(now), ref)
  redis.call('ZREM', KEYS[2], ref)
end
local out = {redis.call('HLEN', KEYS[1])}
for _, ref in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  local h = redis.call('HGET', KEYS[1], ref)
  if h then
    out[#out + 1] = ref
    out[#out + 1] = h
  else
    redis.call('ZREM', KEYS[3], ref)
  end
end
return out
`;

/**
 * The index of users that may have holds (so the reconciler finds them without scanning): score =
 * the latest lease expiry announced for the user. Touched before every reserve and renew.
 * KEYS index · ARGV userId, leaseMs
 */
export const INDEX_TOUCH = `${HELPERS}
redis.call('ZADD', KEYS[1], 'GT', s(now + tonumber(ARGV[2])), ARGV[1])
return 1
`;

/**
 * Forgets a user the sweep found without holds, unless a reserve announced a lease since: that
 * reserve's touch set a score in the future, so a hold recorded after the sweep is never orphaned.
 * KEYS index · ARGV userId
 */
export const INDEX_FORGET = `${HELPERS}
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) <= now then redis.call('ZREM', KEYS[1], ARGV[1]) end
return 1
`;

/**
 * Data-loss guard. The epoch key exists from the first admission after Redis (re)started empty;
 * its value is the server time from which mirrors may be loaded. Until then every node's renewal
 * loop re-registers its live holds, so a balance loaded afterwards is checked against them.
 * KEYS epoch · ARGV recoveryMs → ms still to wait (0 = loading is safe)
 */
export const EPOCH = `${HELPERS}
local ready = redis.call('GET', KEYS[1])
if not ready then
  ready = now + tonumber(ARGV[1])
  redis.call('SET', KEYS[1], s(ready))
end
return math.max(0, tonumber(ready) - now)
`;
