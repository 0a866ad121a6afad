ALTER TABLE `channels` ADD `header_policy` text DEFAULT '{}' NOT NULL;--> statement-breakpoint
ALTER TABLE `prices` ADD `cache_write_1h` integer;--> statement-breakpoint
ALTER TABLE `prices` ADD `long_context_threshold` integer;--> statement-breakpoint
ALTER TABLE `prices` ADD `long_context` text;--> statement-breakpoint
ALTER TABLE `usage_logs` ADD `cache_write_1h_tokens` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `usage_logs` ADD `long_context` integer DEFAULT false NOT NULL;