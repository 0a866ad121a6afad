CREATE TABLE `topup_reversals` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`trade_no` text NOT NULL,
	`key` text NOT NULL,
	`state` text NOT NULL,
	`amount` integer NOT NULL,
	`event_id` text NOT NULL,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `topup_reversals_uq` ON `topup_reversals` (`trade_no`,`key`);--> statement-breakpoint
ALTER TABLE `topup_orders` ADD `payment_ref` text DEFAULT '' NOT NULL;--> statement-breakpoint
ALTER TABLE `topup_orders` ADD `clawed_back` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
CREATE INDEX `topup_orders_payment_ref_idx` ON `topup_orders` (`provider`,`payment_ref`);--> statement-breakpoint
CREATE INDEX `topup_orders_provider_ref_idx` ON `topup_orders` (`provider`,`provider_ref`);