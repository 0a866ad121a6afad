ALTER TABLE `prices` ADD `context_window` integer;--> statement-breakpoint
ALTER TABLE `usage_logs` ADD `usage_flag` text DEFAULT '' NOT NULL;