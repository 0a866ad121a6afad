ALTER TABLE `api_keys` ADD `remain_version` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `users` ADD `balance_version` integer DEFAULT 0 NOT NULL;