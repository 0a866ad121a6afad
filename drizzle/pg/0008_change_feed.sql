-- Change feed: every committed change to a record that a node's in-memory cache holds is announced
-- on the channel `gw_changes` as {"s": schema, "t": table, "id" | "model": key}. NOTIFY is delivered
-- only when the transaction commits (none on rollback), in commit order, to every listening session
-- of the database (not only this schema: hence "s", which listeners filter on).
--
-- Per-request charges must not notify: they would make every node re-read the row on every request,
-- and committing a NOTIFY takes a database-wide lock that serialises the committing transactions.
-- So the UPDATE triggers of users, api_keys and channels name the columns they watch (`UPDATE OF`):
-- a charge, which sets only counters, does not even evaluate them (measured: a WHEN clause alone,
-- evaluated on every charge, added 40-100 us per updated row; the column list adds nothing). The
-- WHEN clause then drops updates that changed no watched value. Every column is either watched or
-- listed as a counter in libs/db/src/pg/change-feed.test.ts, which fails on an unclassified column.
--
-- Counters (not announced): users quota, used_quota, request_count, updated_at (a charge sets it),
-- failed_logins, lock_count, locked_until, totp_last_step; api_keys used_quota, remain_quota,
-- last_used_at; channels response_time_ms, tested_at (probe results).
--
-- Balance: users.quota is a counter. A balance move other than a charge (topup, adjust, redeem,
-- refund) is announced by its ledger row, as the user's id: listeners re-read the balance from the
-- table (the payload carries no amount, so a late notification can never install an old balance).
--
-- The payload is at most 8000 bytes: a key that would not fit (a very long model name) is sent as
-- null, which listeners read as "reload them all".
-- One self-contained function (it calls only pg_catalog functions): a trigger fired from a session
-- whose search_path does not include this schema must still find everything it calls.
CREATE OR REPLACE FUNCTION gw_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  col text := TG_ARGV[0];
  field text := TG_ARGV[1];
  kind text := coalesce(TG_ARGV[2], TG_TABLE_NAME);
  keys jsonb[];
  k jsonb;
  payload text;
BEGIN
  IF TG_OP = 'DELETE' THEN
    keys := ARRAY[to_jsonb(OLD) -> col];
  ELSIF TG_OP = 'INSERT' THEN
    keys := ARRAY[to_jsonb(NEW) -> col];
  ELSIF (to_jsonb(OLD) -> col) IS DISTINCT FROM (to_jsonb(NEW) -> col) THEN
    -- A changed key (a renamed price) leaves the old one stale too.
    keys := ARRAY[to_jsonb(NEW) -> col, to_jsonb(OLD) -> col];
  ELSE
    keys := ARRAY[to_jsonb(NEW) -> col];
  END IF;
  FOREACH k IN ARRAY keys LOOP
    payload := jsonb_build_object('s', TG_TABLE_SCHEMA, 't', kind, field, k)::text;
    IF octet_length(payload) > 7900 THEN
      payload := jsonb_build_object('s', TG_TABLE_SCHEMA, 't', kind, field, null)::text;
    END IF;
    PERFORM pg_notify('gw_changes', payload);
  END LOOP;
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER gw_change_users AFTER INSERT OR DELETE ON users
  FOR EACH ROW EXECUTE FUNCTION gw_notify_change('id', 'id');
--> statement-breakpoint
CREATE TRIGGER gw_change_users_update AFTER UPDATE OF
  id, username, password_hash, display_name, email, role, status, "group", totp_secret,
  totp_enabled, rate_limit_rpm, rate_limit_tpm, max_concurrency, model_limits, created_at
  ON users FOR EACH ROW WHEN (
    OLD.id IS DISTINCT FROM NEW.id OR OLD.username IS DISTINCT FROM NEW.username OR
    OLD.password_hash IS DISTINCT FROM NEW.password_hash OR
    OLD.display_name IS DISTINCT FROM NEW.display_name OR OLD.email IS DISTINCT FROM NEW.email OR
    OLD.role IS DISTINCT FROM NEW.role OR OLD.status IS DISTINCT FROM NEW.status OR
    OLD."group" IS DISTINCT FROM NEW."group" OR OLD.totp_secret IS DISTINCT FROM NEW.totp_secret OR
    OLD.totp_enabled IS DISTINCT FROM NEW.totp_enabled OR
    OLD.rate_limit_rpm IS DISTINCT FROM NEW.rate_limit_rpm OR
    OLD.rate_limit_tpm IS DISTINCT FROM NEW.rate_limit_tpm OR
    OLD.max_concurrency IS DISTINCT FROM NEW.max_concurrency OR
    OLD.model_limits IS DISTINCT FROM NEW.model_limits OR
    OLD.created_at IS DISTINCT FROM NEW.created_at)
  EXECUTE FUNCTION gw_notify_change('id', 'id');
--> statement-breakpoint
CREATE TRIGGER gw_change_api_keys AFTER INSERT OR DELETE ON api_keys
  FOR EACH ROW EXECUTE FUNCTION gw_notify_change('id', 'id');
--> statement-breakpoint
-- An operator's write sets updated_at, so an operator setting remain_quota is heard even within the
-- same second: a budget that moved other than as a charge does (limited keys: remain down by what
-- used went up; unlimited: remain unchanged).
CREATE TRIGGER gw_change_api_keys_update AFTER UPDATE OF
  id, user_id, name, key_hash, prefix, status, expires_at, unlimited_quota, models,
  allow_ips, "group", rate_limit_rpm, rate_limit_tpm, max_concurrency, model_limits, created_at,
  updated_at
  ON api_keys FOR EACH ROW WHEN (
    OLD.id IS DISTINCT FROM NEW.id OR OLD.user_id IS DISTINCT FROM NEW.user_id OR
    OLD.name IS DISTINCT FROM NEW.name OR OLD.key_hash IS DISTINCT FROM NEW.key_hash OR
    OLD.prefix IS DISTINCT FROM NEW.prefix OR OLD.status IS DISTINCT FROM NEW.status OR
    OLD.expires_at IS DISTINCT FROM NEW.expires_at OR
    OLD.unlimited_quota IS DISTINCT FROM NEW.unlimited_quota OR
    OLD.models IS DISTINCT FROM NEW.models OR OLD.allow_ips IS DISTINCT FROM NEW.allow_ips OR
    OLD."group" IS DISTINCT FROM NEW."group" OR
    OLD.rate_limit_rpm IS DISTINCT FROM NEW.rate_limit_rpm OR
    OLD.rate_limit_tpm IS DISTINCT FROM NEW.rate_limit_tpm OR
    OLD.max_concurrency IS DISTINCT FROM NEW.max_concurrency OR
    OLD.model_limits IS DISTINCT FROM NEW.model_limits OR
    OLD.created_at IS DISTINCT FROM NEW.created_at OR OLD.updated_at IS DISTINCT FROM NEW.updated_at OR
    NEW.remain_quota - OLD.remain_quota <> CASE WHEN NEW.unlimited_quota THEN 0 ELSE OLD.used_quota - NEW.used_quota END)
  EXECUTE FUNCTION gw_notify_change('id', 'id');
--> statement-breakpoint
CREATE TRIGGER gw_change_channels AFTER INSERT OR DELETE ON channels
  FOR EACH ROW EXECUTE FUNCTION gw_notify_change('id', 'id');
--> statement-breakpoint
CREATE TRIGGER gw_change_channels_update AFTER UPDATE OF
  id, name, type, base_url, key, models, model_mapping, "group", tag, priority, weight,
  status, timeout_ms, headers, header_policy, keys, key_selection, failure_rules,
  first_byte_timeout_ms, probe_interval_ms, status_reason, overrides, billing_model, created_at, updated_at
  ON channels FOR EACH ROW WHEN (
    OLD.id IS DISTINCT FROM NEW.id OR OLD.name IS DISTINCT FROM NEW.name OR
    OLD.type IS DISTINCT FROM NEW.type OR OLD.base_url IS DISTINCT FROM NEW.base_url OR
    OLD.key IS DISTINCT FROM NEW.key OR OLD.models IS DISTINCT FROM NEW.models OR
    OLD.model_mapping IS DISTINCT FROM NEW.model_mapping OR
    OLD."group" IS DISTINCT FROM NEW."group" OR OLD.tag IS DISTINCT FROM NEW.tag OR
    OLD.priority IS DISTINCT FROM NEW.priority OR OLD.weight IS DISTINCT FROM NEW.weight OR
    OLD.status IS DISTINCT FROM NEW.status OR OLD.timeout_ms IS DISTINCT FROM NEW.timeout_ms OR
    OLD.headers IS DISTINCT FROM NEW.headers OR
    OLD.header_policy IS DISTINCT FROM NEW.header_policy OR OLD.keys IS DISTINCT FROM NEW.keys OR
    OLD.key_selection IS DISTINCT FROM NEW.key_selection OR
    OLD.failure_rules IS DISTINCT FROM NEW.failure_rules OR
    OLD.first_byte_timeout_ms IS DISTINCT FROM NEW.first_byte_timeout_ms OR
    OLD.probe_interval_ms IS DISTINCT FROM NEW.probe_interval_ms OR
    OLD.status_reason IS DISTINCT FROM NEW.status_reason OR
    OLD.overrides IS DISTINCT FROM NEW.overrides OR OLD.billing_model IS DISTINCT FROM NEW.billing_model OR
    OLD.created_at IS DISTINCT FROM NEW.created_at OR OLD.updated_at IS DISTINCT FROM NEW.updated_at)
  EXECUTE FUNCTION gw_notify_change('id', 'id');
--> statement-breakpoint
CREATE TRIGGER gw_change_prices AFTER INSERT OR DELETE ON prices
  FOR EACH ROW EXECUTE FUNCTION gw_notify_change('model', 'model');
--> statement-breakpoint
CREATE TRIGGER gw_change_prices_update AFTER UPDATE ON prices
  FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*)
  EXECUTE FUNCTION gw_notify_change('model', 'model');
--> statement-breakpoint
CREATE TRIGGER gw_change_groups AFTER INSERT OR DELETE ON groups
  FOR EACH ROW EXECUTE FUNCTION gw_notify_change('id', 'id');
--> statement-breakpoint
CREATE TRIGGER gw_change_groups_update AFTER UPDATE ON groups
  FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*)
  EXECUTE FUNCTION gw_notify_change('id', 'id');
--> statement-breakpoint
-- Every balance move but a charge, announced as its user (t = "balance", id = user id).
CREATE TRIGGER gw_change_ledger AFTER INSERT ON ledger
  FOR EACH ROW WHEN (NEW.kind <> 'charge')
  EXECUTE FUNCTION gw_notify_change('user_id', 'id', 'balance');
