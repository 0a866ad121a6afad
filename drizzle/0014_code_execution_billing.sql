ALTER TABLE `prices` ADD `code_execution` integer;--> statement-breakpoint
ALTER TABLE `usage_logs` ADD `code_execution_requests` integer DEFAULT 0 NOT NULL;