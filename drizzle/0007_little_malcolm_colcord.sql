ALTER TABLE `channels` ADD `overrides` text DEFAULT '[]' NOT NULL;--> statement-breakpoint
ALTER TABLE `channels` ADD `billing_model` text DEFAULT 'requested' NOT NULL;--> statement-breakpoint
ALTER TABLE `usage_logs` ADD `billed_model` text DEFAULT '' NOT NULL;--> statement-breakpoint
ALTER TABLE `usage_logs` ADD `overrides` text DEFAULT '' NOT NULL;