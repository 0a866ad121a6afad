CREATE TABLE `alert_outbox` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`event_id` text NOT NULL,
	`type` text NOT NULL,
	`payload` text NOT NULL,
	`status` text DEFAULT 'pending' NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL,
	`next_attempt_at` integer NOT NULL,
	`last_error` text DEFAULT '' NOT NULL,
	`created_at` integer NOT NULL,
	`delivered_at` integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX `alert_outbox_event_uq` ON `alert_outbox` (`event_id`);--> statement-breakpoint
CREATE INDEX `alert_outbox_due_idx` ON `alert_outbox` (`status`,`next_attempt_at`);--> statement-breakpoint
CREATE TABLE `budgets` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`scope` text NOT NULL,
	`subject_id` integer NOT NULL,
	`period` text NOT NULL,
	`limit_amount` integer NOT NULL,
	`period_key` text DEFAULT '' NOT NULL,
	`spent` integer DEFAULT 0 NOT NULL,
	`alerted` integer DEFAULT 0 NOT NULL,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `budgets_subject_uq` ON `budgets` (`scope`,`subject_id`,`period`);--> statement-breakpoint
CREATE TABLE `low_balance_alerts` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`user_id` integer NOT NULL,
	`threshold` integer NOT NULL,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `low_balance_alerts_user_uq` ON `low_balance_alerts` (`user_id`);--> statement-breakpoint
ALTER TABLE `api_keys` ADD `model_limits` text;--> statement-breakpoint
ALTER TABLE `groups` ADD `model_limits` text;--> statement-breakpoint
ALTER TABLE `users` ADD `model_limits` text;