ALTER TABLE `topup_reversals` ADD `gross` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `topup_reversals` ADD `as_of` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `topup_reversals` ADD `since` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
-- Charge rows stated their running total in amount until now.
UPDATE "topup_reversals" SET "gross" = "amount" WHERE "state" = 'refunded';