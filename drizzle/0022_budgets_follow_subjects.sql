-- A budget goes with its subject, in the deleting transaction: a key's (its own DELETE, its user's cascade) and a
-- user's, with the user's low-balance threshold. Left behind, they stayed listed with no owner and could not be removed.
CREATE TRIGGER `api_keys_drop_budgets` AFTER DELETE ON `api_keys` BEGIN
  DELETE FROM `budgets` WHERE `scope` = 'key' AND `subject_id` = OLD.`id`;
END;
--> statement-breakpoint
CREATE TRIGGER `users_drop_budgets` AFTER DELETE ON `users` BEGIN
  DELETE FROM `budgets` WHERE `scope` = 'user' AND `subject_id` = OLD.`id`;
  DELETE FROM `low_balance_alerts` WHERE `user_id` = OLD.`id`;
END;
--> statement-breakpoint
-- And none is written for a subject already gone: a set racing the key's (or user's) deletion, which checked the
-- subject before the delete and wrote after it, would leave one behind.
CREATE TRIGGER `budgets_need_subject` BEFORE INSERT ON `budgets`
  WHEN (NEW.`scope` = 'key' AND NOT EXISTS (SELECT 1 FROM `api_keys` WHERE `id` = NEW.`subject_id`))
    OR (NEW.`scope` = 'user' AND NOT EXISTS (SELECT 1 FROM `users` WHERE `id` = NEW.`subject_id`))
BEGIN
  SELECT RAISE(ABORT, 'budget_subject_gone');
END;
--> statement-breakpoint
CREATE TRIGGER `low_balance_alerts_need_user` BEFORE INSERT ON `low_balance_alerts`
  WHEN NOT EXISTS (SELECT 1 FROM `users` WHERE `id` = NEW.`user_id`)
BEGIN
  SELECT RAISE(ABORT, 'budget_subject_gone');
END;
--> statement-breakpoint
-- Budgets of keys and users deleted before this version.
DELETE FROM `budgets` WHERE (`scope` = 'key' AND `subject_id` NOT IN (SELECT `id` FROM `api_keys`))
  OR (`scope` = 'user' AND `subject_id` NOT IN (SELECT `id` FROM `users`));
--> statement-breakpoint
DELETE FROM `low_balance_alerts` WHERE `user_id` NOT IN (SELECT `id` FROM `users`);
