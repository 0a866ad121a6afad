/**
 * The RedisHoldStore's scripts. Per user (hash tag `{u:<id>}`, so one user's keys share a cluster
 * slot and every script touches one slot):
 *   acct   hash  bal, ver (the mirror), held (Σ holds of the user, limbo included), lg (the load token)
 *   k:<id> hash  bal, ver, held for a limited key (keys belong to one user)
 *   b:<id> hash  pk, spent (the mirror of a budget's period and committed spend), held
 *   holds  hash  ref → "<amount>:<keyId or empty>:<budget ids, comma-separated, or empty>"
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
  local amount, keyId, bids = string.match(h, '^(-?%d+):([^:]*):?(.*)$')
  return tonumber(amount), keyId, bids
end
-- Budget mirrors are ordered by (period key, spent): a later period, or more spend in the same one.
local function newer(pk, sp, cpk, csp)
  return (not cpk) or pk > cpk or (pk == cpk and tonumber(sp) > tonumber(csp))
end
-- install() for a budget hash (spent '' = nothing to install).
local function binstall(key, pk, spent, create)
  if pk == nil or spent == nil or spent == '' then return 0 end
  local cur = redis.call('HMGET', key, 'pk', 'spent')
  if not cur[1] and not create then
    if redis.call('EXISTS', key) == 1 then
      local n = redis.call('HMGET', key, 'npk', 'nspent')
      if newer(pk, spent, n[1], n[2]) then redis.call('HSET', key, 'npk', pk, 'nspent', spent) end
    end
    return 0
  end
  if not cur[1] then
    local n = redis.call('HMGET', key, 'npk', 'nspent')
    if n[1] and newer(n[1], n[2], pk, spent) then pk, spent = n[1], n[2] end
    redis.call('HDEL', key, 'npk', 'nspent')
  end
  if cur[1] and not newer(pk, spent, cur[1], cur[2]) then return 0 end
  redis.call('HSET', key, 'pk', pk, 'spent', spent)
  return 1
end
-- What a budget can still admit in period pk (nil: no mirror). Spend of an earlier period is none;
-- of a later one (this node's clock is behind) counts as is.
local function bavail(key, limit, pk)
  local b = redis.call('HMGET', key, 'pk', 'spent', 'held')
  if not b[1] then return nil end
  local spent = 0
  if b[1] >= pk then spent = num(b[2]) end
  return tonumber(limit) - spent - num(b[3])
end
`;

/**
 * KEYS acct, holds, leases, key, then one budget hash per budget · ARGV ref, amount, leaseMs, keyId|'',
 * budget ids (comma-separated), then limit and period key per budget
 * → {1, amount} | {0, scope, available[, budget index]} | {-1, scope, load token} (scope 1 user, 2 key, 3 budget)
 */
export const RESERVE = `${HELPERS}
local ref, amount, keyId = ARGV[1], tonumber(ARGV[2]), ARGV[4]
-- A mirror to load: the loader checks the epoch, reads the ledger, then installs with LOAD only while
-- acct still has the token it got here. A data loss between the check and the install drops the token
-- (the epoch with it), so a mirror read before the loss is never installed after it.
local function missing(scope)
  redis.call('HSETNX', KEYS[1], 'lg', s(now) .. ':' .. ref)
  return {-1, scope, redis.call('HGET', KEYS[1], 'lg')}
end
local existing = redis.call('HGET', KEYS[2], ref)
if existing then return {1, parse(existing)} end
local u = redis.call('HMGET', KEYS[1], 'bal', 'held')
if not u[1] then return missing(1) end
local k
if keyId ~= '' then
  k = redis.call('HMGET', KEYS[4], 'bal', 'held')
  if not k[1] then return missing(2) end
end
local nb = #KEYS - 4
local bav = {}
for i = 1, nb do
  bav[i] = bavail(KEYS[4 + i], ARGV[4 + 2 * i], ARGV[5 + 2 * i])
  if bav[i] == nil then return missing(3) end
end
-- QuotaService's rule: refuse when amount > available or nothing is available.
local ua = num(u[1]) - num(u[2])
if amount > ua or ua <= 0 then return {0, 1, ua} end
if k then
  local ka = num(k[1]) - num(k[2])
  if amount > ka or ka <= 0 then return {0, 2, ka} end
end
for i = 1, nb do
  if amount > bav[i] or bav[i] <= 0 then return {0, 3, bav[i], i} end
end
if k then redis.call('HINCRBY', KEYS[4], 'held', ARGV[2]) end
for i = 1, nb do redis.call('HINCRBY', KEYS[4 + i], 'held', ARGV[2]) end
redis.call('HINCRBY', KEYS[1], 'held', ARGV[2])
redis.call('HSET', KEYS[2], ref, ARGV[2] .. ':' .. keyId .. ':' .. ARGV[5])
redis.call('ZADD', KEYS[3], s(now + tonumber(ARGV[3])), ref)
return {1, amount}
`;

/**
 * KEYS acct, holds, key, then the hold's budget hashes (its order) · ARGV ref, cost, then limit and
 * period key per budget ('' = not capped by it: the node no longer has it) → charged | -1 (unknown hold)
 */
export const SETTLE = `${HELPERS}
local h = redis.call('HGET', KEYS[2], ARGV[1])
if not h then return -1 end
local amount, keyId, bids = parse(h)
local u = redis.call('HMGET', KEYS[1], 'bal', 'held')
local cap = amount + math.max(0, num(u[1]) - num(u[2]))
if keyId ~= '' then
  local k = redis.call('HMGET', KEYS[3], 'bal', 'held')
  if k[1] then cap = math.min(cap, amount + math.max(0, num(k[1]) - num(k[2]))) end
end
for i = 1, #KEYS - 3 do
  if ARGV[1 + 2 * i] ~= '' then
    local av = bavail(KEYS[3 + i], ARGV[1 + 2 * i], ARGV[2 + 2 * i])
    if av ~= nil then cap = math.min(cap, amount + math.max(0, av)) end
  end
end
local charged = math.min(tonumber(ARGV[2]), cap)
redis.call('HINCRBY', KEYS[1], 'held', s(charged - amount))
if keyId ~= '' then redis.call('HINCRBY', KEYS[3], 'held', s(charged - amount)) end
for i = 1, #KEYS - 3 do redis.call('HINCRBY', KEYS[3 + i], 'held', s(charged - amount)) end
redis.call('HSET', KEYS[2], ARGV[1], s(charged) .. ':' .. keyId .. ':' .. bids)
return charged
`;

/**
 * KEYS acct, holds, leases, limbo, key, then budget hashes (the hold's, and any whose spend is installed)
 * · ARGV ref, userBal, userVer, keyBal, keyVer ('' = none), then budget id, period key, spent ('' = none)
 * per budget hash
 */
export const RELEASE = `${HELPERS}
local bkey = {}
for i = 1, #KEYS - 5 do bkey[ARGV[3 + 3 * i]] = KEYS[5 + i] end
local h = redis.call('HGET', KEYS[2], ARGV[1])
if h then
  local amount, keyId, bids = parse(h)
  redis.call('HINCRBY', KEYS[1], 'held', s(-amount))
  if keyId ~= '' then redis.call('HINCRBY', KEYS[5], 'held', s(-amount)) end
  for id in string.gmatch(bids, '[^,]+') do
    if bkey[id] then redis.call('HINCRBY', bkey[id], 'held', s(-amount)) end
  end
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
end
install(KEYS[1], ARGV[2], ARGV[3], false)
install(KEYS[5], ARGV[4], ARGV[5], false)
for i = 1, #KEYS - 5 do binstall(KEYS[5 + i], ARGV[4 + 3 * i], ARGV[5 + 3 * i], false) end
return 1
`;

/**
 * The reserve's loader: installs (creating them) the mirrors it read, only if acct still has the token
 * RESERVE gave it; else nothing (Redis lost its data during the load: the epoch decides again).
 * KEYS acct, key hash, then budget hashes · ARGV token, userBal, userVer, keyBal, keyVer ('' = none), then
 * period key and spent per budget hash → 1 installed | 0 token gone
 */
export const LOAD = `${HELPERS}
if redis.call('HGET', KEYS[1], 'lg') ~= ARGV[1] then return 0 end
install(KEYS[1], ARGV[2], ARGV[3], true)
install(KEYS[2], ARGV[4], ARGV[5], true)
for i = 3, #KEYS do binstall(KEYS[i], ARGV[2 * i], ARGV[2 * i + 1], true) end
return 1
`;

/** KEYS mirror hash · ARGV bal, ver, ifPresent ('1': only replace an existing mirror) → 1 installed | 0 not */
export const APPLY = `${HELPERS}
return install(KEYS[1], ARGV[1], ARGV[2], ARGV[3] ~= '1')
`;

/** KEYS budget hash · ARGV period key, spent, ifPresent ('1') → 1 installed | 0 not */
export const BUDGET_APPLY = `${HELPERS}
return binstall(KEYS[1], ARGV[1], ARGV[2], ARGV[3] ~= '1')
`;

/**
 * KEYS acct, holds, leases, limbo, then per hold its key hash and its budget hashes · ARGV leaseMs,
 * then ref, amount, keyId, budget ids, number of budgets per hold → how many holds were missing and
 * registered again.
 */
export const RENEW = `${HELPERS}
local expiry = s(now + tonumber(ARGV[1]))
local registered = 0
local kx = 5
for i = 0, (#ARGV - 1) / 5 - 1 do
  local ref, amount, keyId, bids, nb = ARGV[2 + 5 * i], ARGV[3 + 5 * i], ARGV[4 + 5 * i], ARGV[5 + 5 * i], tonumber(ARGV[6 + 5 * i])
  if redis.call('HEXISTS', KEYS[2], ref) == 0 then
    redis.call('HSET', KEYS[2], ref, amount .. ':' .. keyId .. ':' .. bids)
    redis.call('HINCRBY', KEYS[1], 'held', amount)
    if keyId ~= '' then redis.call('HINCRBY', KEYS[kx], 'held', amount) end
    for j = 1, nb do redis.call('HINCRBY', KEYS[kx + j], 'held', amount) end
    registered = registered + 1
  end
  kx = kx + 1 + nb
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
