ALTER TABLE `prices` ADD `web_search` integer;--> statement-breakpoint
ALTER TABLE `usage_logs` ADD `web_search_requests` integer DEFAULT 0 NOT NULL;