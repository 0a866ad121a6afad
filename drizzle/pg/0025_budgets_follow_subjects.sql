-- A budget goes with its subject, in the deleting transaction: a key's (its own DELETE, its user's cascade) and a
-- user's, with the user's low-balance threshold. Left behind, they stayed listed with no owner and could not be
-- removed. Tables are named with the trigger's own schema, as in gw_remember_key_owner.
CREATE OR REPLACE FUNCTION gw_drop_key_budgets() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('DELETE FROM %I.budgets WHERE scope = ''key'' AND subject_id = $1', TG_TABLE_SCHEMA) USING OLD.id;
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER gw_api_keys_drop_budgets AFTER DELETE ON api_keys FOR EACH ROW EXECUTE FUNCTION gw_drop_key_budgets();
--> statement-breakpoint
CREATE OR REPLACE FUNCTION gw_drop_user_budgets() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('DELETE FROM %I.budgets WHERE scope = ''user'' AND subject_id = $1', TG_TABLE_SCHEMA) USING OLD.id;
  EXECUTE format('DELETE FROM %I.low_balance_alerts WHERE user_id = $1', TG_TABLE_SCHEMA) USING OLD.id;
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER gw_users_drop_budgets AFTER DELETE ON users FOR EACH ROW EXECUTE FUNCTION gw_drop_user_budgets();
--> statement-breakpoint
-- Budgets of keys and users deleted before this version.
DELETE FROM budgets WHERE (scope = 'key' AND subject_id NOT IN (SELECT id FROM api_keys))
  OR (scope = 'user' AND subject_id NOT IN (SELECT id FROM users));
--> statement-breakpoint
DELETE FROM low_balance_alerts WHERE user_id NOT IN (SELECT id FROM users);
