CREATE TABLE `deleted_api_keys` (
	`id` integer PRIMARY KEY NOT NULL,
	`user_id` integer NOT NULL
);
--> statement-breakpoint
-- Every way a key goes (its own DELETE, its user's cascade) records its owner, in the deleting transaction.
CREATE TRIGGER `api_keys_remember_owner` AFTER DELETE ON `api_keys` BEGIN
  INSERT OR IGNORE INTO `deleted_api_keys` (`id`, `user_id`) VALUES (OLD.`id`, OLD.`user_id`);
END;
--> statement-breakpoint
-- Keys deleted before this version: their owners as their usage rows name them (one pass over usage_logs, once).
INSERT OR IGNORE INTO `deleted_api_keys` (`id`, `user_id`)
  SELECT `api_key_id`, min(`user_id`) FROM `usage_logs` WHERE `api_key_id` NOT IN (SELECT `id` FROM `api_keys`) GROUP BY `api_key_id`;
