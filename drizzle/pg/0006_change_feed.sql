-- Change feed: every committed change to a record that a node's in-memory cache holds is announced
-- on the channel `gw_changes` as {"s": schema, "t": table, "id" | "model": key}. NOTIFY is delivered
-- only when the transaction commits (none on rollback), in commit order, to every listening session
-- of the database (not only this schema: hence "s", which listeners filter on).
--
-- Per-request charges must not notify: they would make every node re-read the row on every request,
-- and committing a NOTIFY takes a database-wide lock that serialises the committing transactions.
-- So UPDATE triggers carry WHEN clauses that ignore counter-only updates. The exclusions name the
-- counters (everything else notifies), so a column added later is announced by default.
-- `balance_version` is excluded ahead of its arrival (removing an absent key from jsonb is a no-op).
--
-- Balance: users.quota is a counter here. A balance move other than a charge (topup, adjust, redeem,
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
-- Charges (quota, used_quota, request_count, updated_at) and login bookkeeping do not notify.
CREATE TRIGGER gw_change_users_update AFTER UPDATE ON users
  FOR EACH ROW WHEN (
    (to_jsonb(OLD) - ARRAY['quota', 'used_quota', 'request_count', 'updated_at', 'balance_version',
                           'failed_logins', 'lock_count', 'locked_until', 'totp_last_step'])
    IS DISTINCT FROM
    (to_jsonb(NEW) - ARRAY['quota', 'used_quota', 'request_count', 'updated_at', 'balance_version',
                           'failed_logins', 'lock_count', 'locked_until', 'totp_last_step']))
  EXECUTE FUNCTION gw_notify_change('id', 'id');
--> statement-breakpoint
CREATE TRIGGER gw_change_api_keys AFTER INSERT OR DELETE ON api_keys
  FOR EACH ROW EXECUTE FUNCTION gw_notify_change('id', 'id');
--> statement-breakpoint
-- A charge moves used_quota up and (limited keys only) remain_quota down by the same amount and sets
-- last_used_at; that alone does not notify. An operator setting remain_quota does.
CREATE TRIGGER gw_change_api_keys_update AFTER UPDATE ON api_keys
  FOR EACH ROW WHEN (
    (to_jsonb(OLD) - ARRAY['used_quota', 'remain_quota', 'last_used_at', 'balance_version'])
    IS DISTINCT FROM
    (to_jsonb(NEW) - ARRAY['used_quota', 'remain_quota', 'last_used_at', 'balance_version'])
    OR NEW.remain_quota - OLD.remain_quota
       <> CASE WHEN NEW.unlimited_quota THEN 0 ELSE OLD.used_quota - NEW.used_quota END)
  EXECUTE FUNCTION gw_notify_change('id', 'id');
--> statement-breakpoint
CREATE TRIGGER gw_change_channels AFTER INSERT OR DELETE ON channels
  FOR EACH ROW EXECUTE FUNCTION gw_notify_change('id', 'id');
--> statement-breakpoint
-- Probe results (response time, when tested) are not routing state; status changes are.
CREATE TRIGGER gw_change_channels_update AFTER UPDATE ON channels
  FOR EACH ROW WHEN (
    (to_jsonb(OLD) - ARRAY['response_time_ms', 'tested_at'])
    IS DISTINCT FROM
    (to_jsonb(NEW) - ARRAY['response_time_ms', 'tested_at']))
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
