ALTER TABLE `topup_orders` ADD `paid_amount` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `topup_orders` ADD `paid_currency` text DEFAULT '' NOT NULL;