ALTER TABLE "api_keys" ADD COLUMN "remain_version" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "users" ADD COLUMN "balance_version" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
-- Versions of the balances mirrored in Redis (quota admission across nodes): every write of
-- users.quota, and of api_keys.remain_quota / unlimited_quota, bumps its version in the same
-- statement, whoever writes it (settlement, ledger, admin edit), so a mirror carrying a version is
-- only ever replaced by a newer one. Counters for the change feed: moving them announces nothing.
CREATE OR REPLACE FUNCTION gw_bump_balance_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.balance_version := OLD.balance_version + 1;
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION gw_bump_remain_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.remain_version := OLD.remain_version + 1;
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER gw_users_balance_version BEFORE UPDATE OF quota ON users
  FOR EACH ROW WHEN (OLD.quota IS DISTINCT FROM NEW.quota)
  EXECUTE FUNCTION gw_bump_balance_version();
--> statement-breakpoint
CREATE TRIGGER gw_api_keys_remain_version BEFORE UPDATE OF remain_quota, unlimited_quota ON api_keys
  FOR EACH ROW WHEN (OLD.remain_quota IS DISTINCT FROM NEW.remain_quota OR OLD.unlimited_quota IS DISTINCT FROM NEW.unlimited_quota)
  EXECUTE FUNCTION gw_bump_remain_version();
