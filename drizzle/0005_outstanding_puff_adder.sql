CREATE TABLE `redemption_codes` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`code_hash` text NOT NULL,
	`prefix` text NOT NULL,
	`batch` text NOT NULL,
	`quota` integer NOT NULL,
	`status` text DEFAULT 'unused' NOT NULL,
	`expires_at` integer NOT NULL,
	`created_by` integer NOT NULL,
	`created_at` integer NOT NULL,
	`redeemed_by` integer,
	`redeemed_at` integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX `redemption_codes_hash_uq` ON `redemption_codes` (`code_hash`);--> statement-breakpoint
CREATE INDEX `redemption_codes_batch_idx` ON `redemption_codes` (`batch`,`id`);