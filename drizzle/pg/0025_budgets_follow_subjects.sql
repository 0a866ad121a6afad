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
-- And none is written for a subject already gone: a set racing the key's (or user's) deletion, which checked the
-- subject before the delete and wrote after it, would leave one behind. The subject's row is locked (FOR KEY SHARE)
-- until the insert commits, so a delete waits for it (and its trigger then removes the budget), or came first.
CREATE OR REPLACE FUNCTION gw_budget_needs_subject() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  row jsonb := to_jsonb(NEW);
  subject_table text := 'users';
  subject bigint := (row->>'user_id')::bigint;
  found_id bigint;
BEGIN
  IF TG_TABLE_NAME = 'budgets' THEN
    subject_table := CASE WHEN row->>'scope' = 'key' THEN 'api_keys' ELSE 'users' END;
    subject := (row->>'subject_id')::bigint;
  END IF;
  EXECUTE format('SELECT id FROM %I.%I WHERE id = $1 FOR KEY SHARE', TG_TABLE_SCHEMA, subject_table) INTO found_id USING subject;
  IF found_id IS NULL THEN
    RAISE EXCEPTION 'budget_subject_gone';
  END IF;
  RETURN NEW;
END $$;
--> statement-breakpoint
CREATE TRIGGER gw_budgets_need_subject BEFORE INSERT ON budgets FOR EACH ROW EXECUTE FUNCTION gw_budget_needs_subject();
--> statement-breakpoint
CREATE TRIGGER gw_low_balance_alerts_need_user BEFORE INSERT ON low_balance_alerts FOR EACH ROW EXECUTE FUNCTION gw_budget_needs_subject();
--> statement-breakpoint
-- Budgets of keys and users deleted before this version.
DELETE FROM budgets WHERE (scope = 'key' AND subject_id NOT IN (SELECT id FROM api_keys))
  OR (scope = 'user' AND subject_id NOT IN (SELECT id FROM users));
--> statement-breakpoint
DELETE FROM low_balance_alerts WHERE user_id NOT IN (SELECT id FROM users);
