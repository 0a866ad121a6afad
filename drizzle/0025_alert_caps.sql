CREATE TABLE `alert_caps` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`cap_key` text NOT NULL,
	`period_key` text NOT NULL,
	`n` integer NOT NULL,
	`expires_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `alert_caps_key_uq` ON `alert_caps` (`cap_key`);--> statement-breakpoint
CREATE INDEX `alert_caps_expires_idx` ON `alert_caps` (`expires_at`);