CREATE TABLE `groups` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`name` text NOT NULL,
	`description` text DEFAULT '' NOT NULL,
	`ratio` integer DEFAULT 1000 NOT NULL,
	`fallbacks` text DEFAULT '[]' NOT NULL,
	`rate_limit_rpm` integer DEFAULT 0 NOT NULL,
	`rate_limit_tpm` integer DEFAULT 0 NOT NULL,
	`max_concurrency` integer DEFAULT 0 NOT NULL,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `groups_name_uq` ON `groups` (`name`);--> statement-breakpoint
ALTER TABLE `api_keys` ADD `rate_limit_tpm` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `api_keys` ADD `max_concurrency` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `users` ADD `rate_limit_rpm` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `users` ADD `rate_limit_tpm` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `users` ADD `max_concurrency` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `usage_logs` ADD `group` text DEFAULT '' NOT NULL;--> statement-breakpoint
ALTER TABLE `usage_logs` ADD `price_ratio` integer DEFAULT 1000 NOT NULL;