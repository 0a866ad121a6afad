ALTER TABLE `channels` ADD `keys` text DEFAULT '[]' NOT NULL;--> statement-breakpoint
ALTER TABLE `channels` ADD `key_selection` text DEFAULT 'random' NOT NULL;--> statement-breakpoint
ALTER TABLE `channels` ADD `failure_rules` text DEFAULT '{}' NOT NULL;--> statement-breakpoint
ALTER TABLE `channels` ADD `first_byte_timeout_ms` integer;--> statement-breakpoint
ALTER TABLE `channels` ADD `probe_interval_ms` integer;