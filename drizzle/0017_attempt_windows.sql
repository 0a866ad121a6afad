CREATE TABLE `attempt_windows` (
	`key` text PRIMARY KEY NOT NULL,
	`window_ms` integer NOT NULL,
	`start` integer NOT NULL,
	`cur` integer NOT NULL,
	`prev` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `attempt_windows_start_idx` ON `attempt_windows` (`start`);